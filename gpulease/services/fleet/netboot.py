"""Network boot from the control plane: the iPXE script a server's boot network chains to
(`chain http://<control plane>/media/ipxe?mac=${net0/mac}`), and the NoCloud seed its
installer reads over HTTP. A server being deployed boots its image's kernel and initrd, one
being cleaned the agent ramdisk; any other server is told to boot from its disk.

A MAC is no secret (it is on the wire and often on a label), so it only says which script;
who may have it is the address asking: one in the operator's boot networks
(GPULEASE_BOOT_NETWORKS), in the node's site's own boot networks when its catalog entry
declares them (a server in Ningxia is never answered from Sichuan's), and the node's own
boot address when enrollment gave one. The
script names the deploy's seed by a random id made for that deploy (not derived from the
MAC); the seed answers the same address, only while that deploy runs, and the one-time agent
token in it dies with the deploy."""

from __future__ import annotations

import ipaddress
import json
import re

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.configdrive import read_iso
from gpulease.db.tables import ConfigDrive, Instance, Node
from gpulease.domain.errors import Forbidden, InvalidInput, NotFound
from gpulease.domain.states import NODE_IN_PIPELINE, NodeStatus
from gpulease.ports.records import Priced, Records
from gpulease.services.platform.sites import media_base

MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
SEED_FILES = ("user-data", "meta-data", "network-config", "vendor-data")
LOCAL_DISK = "#!ipxe\necho gpulease: nothing to install on this server; booting from disk\nexit\n"


def _node_for_mac(s: Session, mac: str) -> Node | None:
    """The deploying or cleaning node whose BMC inventory lists this MAC."""
    candidates = s.scalars(select(Node).where(  # BMCs write MACs in either case
        Node.status.in_([status.value for status in NODE_IN_PIPELINE]),
        func.lower(Node.inventory_json).contains(mac)))
    for node in candidates:
        record = json.loads(node.inventory_json or "{}")
        macs = (record.get("bmc") or record).get("nic_macs") or ()
        if mac in (m.lower() for m in macs):
            return node
    return None


def on_boot_network(p: Records, source: str | None) -> None:
    """Refuse a caller outside the operator's boot networks."""
    try:
        address = ipaddress.ip_address(source or "")
    except ValueError:
        address = None
    networks = [ipaddress.ip_network(n, strict=False) for n in p.settings.boot_networks]
    if address is None or not any(address in n for n in networks):
        raise Forbidden("Network boot answers only the boot network (GPULEASE_BOOT_NETWORKS); "
                        "{source} is not on it.",
                        source=source or 'this address')


def _from_node(p: Priced, node: Node, source: str | None) -> bool:
    """Whether `source` may be this node asking: its site's boot networks (when the site
    declares them), and its own boot address (when enrollment gave one)."""
    site = p.catalog.site_entry(node.region)
    if site is not None and (source is None or not site.boots_from(source)):
        return False
    return node.boot_address is None or (
        source is not None and ipaddress.ip_address(source) == ipaddress.ip_address(
            node.boot_address))


def ipxe_script(p: Priced, mac: str, source: str | None) -> str:
    on_boot_network(p, source)
    mac = mac.strip().lower().replace("-", ":")
    if not MAC.match(mac):
        raise InvalidInput("mac", "{mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff); chain "
                                  "with ?mac=${{net0/mac}}.", mac=mac)
    public = p.settings.public_url.rstrip("/")
    with p.db.read() as s:
        node = _node_for_mac(s, mac)
        if node is None or not _from_node(p, node, source):
            return LOCAL_DISK  # the same answer as for a MAC with nothing to install
        inst = s.get(Instance, node.instance_id) if node.instance_id else None
        media = media_base(p, node.region)  # its site's media server
        drive = s.scalar(select(ConfigDrive.id).where(ConfigDrive.node_id == node.id)
                         .order_by(ConfigDrive.created_at.desc()).limit(1))
        base = (f"{media}/{inst.image_id}" if node.status == NodeStatus.DEPLOYING.value
                and inst is not None else f"{media}/agent-ramdisk")
    seed = f" ds=nocloud-net;s={public}/media/nocloud/{drive}/" if drive else ""
    return (f"#!ipxe\n# gpulease: {node.name} ({node.status})\n"
            f"kernel {base}/vmlinuz ip=dhcp{seed}\n"
            f"initrd {base}/initrd\nboot\n")


def live_drive(s: Session, drive_id: str) -> tuple[ConfigDrive, Node] | None:
    """A config drive whose node deploys or cleans now, with that node; None otherwise."""
    drive = s.get(ConfigDrive, drive_id)
    node = s.get(Node, drive.node_id) if drive is not None else None
    if drive is None or node is None or NodeStatus(node.status) not in NODE_IN_PIPELINE:
        return None
    return drive, node


def config_drive_iso(p: Records, drive_id: str) -> bytes:
    """The config drive a deploying or cleaning server's BMC mounts (its id is the
    capability); NotFound once its server is installed."""
    with p.db.read() as s:
        live = live_drive(s, drive_id)
        if live is None:
            raise NotFound("No such config drive; it is deleted once its server is installed.")
        return live[0].iso


def nocloud_file(p: Priced, drive_id: str, name: str, source: str | None) -> str:
    on_boot_network(p, source)
    if name not in SEED_FILES:
        raise NotFound("A NoCloud seed has {files}; not {name!r}.",
                       files=', '.join(SEED_FILES), name=name)
    with p.db.read() as s:
        live = live_drive(s, drive_id)
        if live is None or not _from_node(p, live[1], source):
            raise NotFound("No such seed; it is deleted once its server is installed.")
        iso = live[0].iso
    return read_iso(iso).get(name, "")

"""The lab's virtual servers in libvirt: a storage pool of the lab's own (a directory in the
lab's folder), and per server a system disk and a data disk in it (sushy-tools lists only
pool volumes as drives), a CD-ROM for virtual media, and a user-mode NIC whose SSH port is
forwarded to a loopback port. Every domain carries the lab's name in its metadata, so
`remove` takes what this lab made and nothing else."""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

LIBVIRT_URI = "qemu:///system"
LAB_NS = "https://gpulease.dev/lab/1"
GIB = 1024**3


@dataclass(frozen=True)
class Shape:
    """What each virtual server has (the lab's catalog offer sells exactly this)."""

    memory_mib: int = 1024
    vcpus: int = 1
    system_disk_bytes: int = 10 * 10**9  # the offer's 2 × 0.01 TB
    data_disk_bytes: int = 10 * 10**9


@dataclass(frozen=True)
class Server:
    name: str
    uuid: str
    mac: str
    ssh_port: int  # 127.0.0.1:<ssh_port> reaches the server's port 22
    fabric_mac: str = ""  # its NIC on the lab's fabric (labs of two servers or more)


def pool_name(lab: str) -> str:
    return f"gpulease-{lab}"


def fabric_name(lab: str) -> str:
    return f"gpulease-{lab}-fabric"


def ensure_fabric(lab: str) -> None:
    """The lab's fabric: an isolated libvirt network (a bridge with no address on the host
    and no forwarding): the lab's servers reach each other on it, and nothing else."""
    import libvirt

    conn = libvirt.open(LIBVIRT_URI)
    try:
        try:
            net = conn.networkLookupByName(fabric_name(lab))
        except libvirt.libvirtError:
            bridge = "glf" + hashlib.sha256(lab.encode()).hexdigest()[:10]
            net = conn.networkDefineXML(
                f"<network><name>{escape(fabric_name(lab))}</name><bridge name='{bridge}' "
                "stp='off' delay='0'/></network>")
        if not net.isActive():
            net.create()
    finally:
        conn.close()


def reachable_by_qemu(folder: Path) -> None:
    """QEMU runs as its own user (libvirt-qemu): every folder above the disks must let
    others pass (o+x), or the domain cannot start. Said before anything is made."""
    for parent in [folder.resolve(), *folder.resolve().parents]:
        if parent.exists() and not parent.stat().st_mode & 0o001:
            raise RuntimeError(f"QEMU (as libvirt's user) cannot reach {folder}: {parent} "
                               "lets no one else pass; choose a --dir under a folder that "
                               "does (chmod o+x), e.g. /var/tmp")


def ensure_pool(lab: str, folder: Path) -> None:
    """The lab's directory pool, defined and started (made once)."""
    import libvirt

    reachable_by_qemu(folder.parent)
    conn = libvirt.open(LIBVIRT_URI)
    try:
        try:
            pool = conn.storagePoolLookupByName(pool_name(lab))
        except libvirt.libvirtError:
            if not folder.exists():
                folder.mkdir()
                folder.chmod(0o711)  # whatever the process's umask
            pool = conn.storagePoolDefineXML(
                f"<pool type='dir'><name>{escape(pool_name(lab))}</name><target><path>"
                f"{escape(str(folder))}</path></target></pool>", 0)
        if not pool.isActive():
            pool.create(0)
    finally:
        conn.close()


def _volume(pool: object, name: str, size: int) -> str:
    import libvirt

    try:
        vol = pool.storageVolLookupByName(name)  # type: ignore[attr-defined]
    except libvirt.libvirtError:
        vol = pool.createXML(  # type: ignore[attr-defined]
            f"<volume><name>{escape(name)}</name><capacity unit='bytes'>{size}</capacity>"
            "<target><format type='qcow2'/></target></volume>", 0)
    return str(vol.path())


def _fabric_nic(lab: str, server: Server) -> str:
    """The fabric NIC after the user-mode one (PCI slot 0x1f after 0x1e): the server's
    eth1."""
    if not server.fabric_mac:
        return ""
    return (f"<interface type='network'><mac address='{server.fabric_mac}'/>"
            f"<source network='{escape(fabric_name(lab))}'/><model type='virtio'/>"
            "<address type='pci' domain='0x0000' bus='0x00' slot='0x1f' function='0x0'/>"
            "</interface>")


def domain_xml(lab: str, server: Server, disks: tuple[str, str], domain_type: str,
               shape: Shape) -> str:
    system, data = disks
    return f"""<domain type='{domain_type}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{escape(server.name)}</name>
  <uuid>{server.uuid}</uuid>
  <metadata><lab:lab xmlns:lab='{LAB_NS}' name='{escape(lab)}'/></metadata>
  <memory unit='MiB'>{shape.memory_mib}</memory>
  <vcpu>{shape.vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap'/><source file='{escape(system)}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap'/><source file='{escape(data)}'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/><target dev='sda' bus='sata'/><readonly/>
    </disk>
    {_fabric_nic(lab, server)}
    <serial type='pty'/>
    <console type='pty'/>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='user,id=labnet0,hostfwd=tcp:127.0.0.1:{server.ssh_port}-:22'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=labnet0,mac={server.mac},addr=0x1e'/>
  </qemu:commandline>
</domain>"""


def make(lab: str, folder: Path, count: int, first_ssh_port: int, domain_type: str,
         shape: Shape = Shape()) -> list[Server]:
    """`count` servers named `<lab>-01`…, defined (powered off), with their disks; two or
    more share the lab's fabric."""
    import libvirt

    ensure_pool(lab, folder)
    if count >= 2:
        ensure_fabric(lab)
    conn = libvirt.open(LIBVIRT_URI)
    servers = []
    try:
        pool = conn.storagePoolLookupByName(pool_name(lab))
        for i in range(1, count + 1):
            name = f"{lab}-{i:02d}"
            try:
                known = conn.lookupByName(name)
                if owner(known.XMLDesc(0)) != lab:
                    raise RuntimeError(f"a libvirt domain named {name} exists and is not "
                                       f"this lab's: rename the lab (--name)")
                servers.append(_server_of(known.XMLDesc(0), first_ssh_port + i - 1))
                continue
            except libvirt.libvirtError:
                pass
            server = Server(name, str(uuidlib.uuid4()), f"52:54:00:1a:{i // 256:02x}:"
                            f"{i % 256:02x}", first_ssh_port + i - 1,
                            f"52:54:00:1b:{i // 256:02x}:{i % 256:02x}" if count >= 2 else "")
            disks = (_volume(pool, f"{name}-system.qcow2", shape.system_disk_bytes),
                     _volume(pool, f"{name}-data.qcow2", shape.data_disk_bytes))
            conn.defineXML(domain_xml(lab, server, disks, domain_type, shape))
            servers.append(server)
    finally:
        conn.close()
    return servers


def _server_of(xml: str, ssh_port: int) -> Server:
    tree = ET.fromstring(xml)
    macs = [a for a in tree.iter() if a.tag.endswith("arg") and "mac=" in a.get("value", "")]
    mac = macs[0].get("value", "").split("mac=")[-1].split(",")[0] if macs else ""
    fabric = tree.find("devices/interface/mac")
    return Server(tree.findtext("name") or "", tree.findtext("uuid") or "", mac, ssh_port,
                  fabric.get("address", "") if fabric is not None else "")


def owner(xml: str) -> str | None:
    """The lab that made a domain (its metadata), or None for anyone else's."""
    tree = ET.fromstring(xml)
    tag = tree.find(f"metadata/{{{LAB_NS}}}lab")
    return tag.get("name") if tag is not None else None


def power_state(name: str) -> str:
    """"On" or "Off", as libvirt sees the domain (not through the BMC)."""
    import libvirt

    conn = libvirt.open(LIBVIRT_URI)
    try:
        return "On" if conn.lookupByName(name).isActive() else "Off"
    finally:
        conn.close()


def remove(lab: str) -> list[str]:
    """This lab's domains (stopped, undefined), their volumes and the lab's pool; returns
    the names of the domains removed. Domains without this lab's mark are left alone."""
    import libvirt

    removed = []
    conn = libvirt.open(LIBVIRT_URI)
    try:
        for dom in conn.listAllDomains(0):
            if owner(dom.XMLDesc(0)) != lab:
                continue
            if dom.isActive():
                dom.destroy()
            dom.undefine()
            removed.append(dom.name())
        try:
            net = conn.networkLookupByName(fabric_name(lab))
            if net.isActive():
                net.destroy()
            net.undefine()
        except libvirt.libvirtError:
            pass  # a lab of one server has no fabric
        try:
            pool = conn.storagePoolLookupByName(pool_name(lab))
        except libvirt.libvirtError:
            return removed
        if not pool.isActive():
            pool.create(0)
        for vol in pool.listAllVolumes(0):
            vol.delete(0)
        pool.destroy()
        pool.delete(0)  # the (now empty) folder
        pool.undefine()
    finally:
        conn.close()
    return sorted(removed)


def quiet_libvirt() -> None:
    """libvirt prints every error it raises to stderr; the lab handles them itself."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)

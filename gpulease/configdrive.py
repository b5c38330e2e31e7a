"""The cloud-init NoCloud config drive a server boots with: an ISO 9660 image labelled
`cidata` with user-data, meta-data and network-config, built in Python (pycdlib).

user-data is JSON, which is valid YAML, under the `#cloud-config` header: no YAML writer
needed and no quoting surprises in keys or hostnames. A platform deploy's drive carries no
credential of the tenant's: the agent's configure writes them once the node passed its
acceptance (agent/handover.py)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import bcrypt
import pycdlib


@dataclass(frozen=True)
class ConfigDriveSpec:
    instance_id: str
    hostname: str
    agent_url: str
    agent_token: str  # one-time: the agent trades it for a per-node credential
    # The tenant's credentials, for a server with no acceptance run before it is handed over
    # (`gpulease lab deploy`). The platform's deploys leave them out: root stays locked with
    # no key until the node passed its acceptance and the agent's configure puts them in.
    ssh_keys: tuple[str, ...] = ()
    root_password: str | None = None  # hashed into the drive, never written in clear
    data_disk_mount: str = "/data"
    # the server's data disk as its kernel names it (the lab's virtio servers: /dev/vdb)
    data_disk_device: str = "/dev/nvme1n1"
    # a NIC on a fabric with no DHCP (the lab's eth1): brought up with its IPv6 link-local
    # address only; None: every NIC asks DHCP
    fabric_nic: str | None = None
    # the data disk left unformatted for LUKS2 under the tenant's own key
    encrypted_data: bool = False
    # the agent's GPU backend (`gpulease agent --backend`) and, simulated, its GPU count
    agent_backend: str = "auto"
    agent_gpus: int = 8


def hash_root_password(password: str) -> str:
    # bcrypt ($2b$) is understood by libxcrypt, the crypt() of current Ubuntu and Debian.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


def _root(spec: ConfigDriveSpec) -> dict[str, object]:
    if spec.root_password is None and not spec.ssh_keys:
        return {"name": "root", "lock_passwd": True}  # nothing of the tenant's yet
    root: dict[str, object] = {"name": "root", "lock_passwd": spec.root_password is None,
                               "ssh_authorized_keys": list(spec.ssh_keys)}
    if spec.root_password is not None:
        root["hashed_passwd"] = hash_root_password(spec.root_password)
    return root


def user_data(spec: ConfigDriveSpec) -> str:
    config = {
        "hostname": spec.hostname,
        "fqdn": spec.hostname,
        "disable_root": False,
        "ssh_pwauth": False,
        "users": [_root(spec)],
        "disk_setup": {spec.data_disk_device: {"table_type": "gpt", "layout": True,
                                               "overwrite": False}},
        "fs_setup": [{"label": "data", "filesystem": "ext4",
                      "device": spec.data_disk_device, "partition": "auto"}],
        "mounts": [["LABEL=data", spec.data_disk_mount, "ext4", "defaults,nofail", "0", "2"]],
        "write_files": [{"path": "/etc/gpulease/agent.env", "permissions": "0600",
                         "content": f"GPULEASE_URL={spec.agent_url}\n"
                                    f"GPULEASE_AGENT_TOKEN={spec.agent_token}\n"
                                    f"GPULEASE_INSTANCE={spec.instance_id}\n"
                                    f"GPULEASE_AGENT_BACKEND={spec.agent_backend}\n"
                                    f"GPULEASE_AGENT_GPUS={spec.agent_gpus}\n"}],
        "runcmd": [["systemctl", "enable", "--now", "gpulease-agent.service"]],
    }
    if spec.fabric_nic:  # cloud-init leaves an address-less NIC down ("inet manual")
        config["bootcmd"] = [["ip", "link", "set", "dev", spec.fabric_nic, "up"]]
    if spec.encrypted_data:  # the tenant formats it under a key the platform never sees
        for key in ("disk_setup", "fs_setup", "mounts"):
            config.pop(key)
        config["write_files"].append({  # type: ignore[attr-defined]
            "path": "/etc/motd.d/50-gpulease-data", "permissions": "0644",
            "content": f"The data disk {spec.data_disk_device} is left unformatted, to be "
                       "encrypted with a key only you hold:\n  gpulease agent encrypt-data "
                       f"{spec.data_disk_device} --yes\nAfter a reboot: gpulease agent "
                       f"unlock-data {spec.data_disk_device}\n"})
    return "#cloud-config\n" + json.dumps(config, indent=2) + "\n"


def meta_data(spec: ConfigDriveSpec) -> str:
    return json.dumps({"instance-id": spec.instance_id, "local-hostname": spec.hostname}) + "\n"


def network_config(spec: ConfigDriveSpec | None = None) -> str:
    if spec is None or spec.fabric_nic is None:
        return json.dumps({"version": 2, "ethernets": {"all": {
            "match": {"name": "e*"}, "dhcp4": True, "dhcp6": False}}}) + "\n"
    return json.dumps({"version": 2, "ethernets": {
        "eth0": {"dhcp4": True, "dhcp6": False},
        spec.fabric_nic: {"dhcp4": False, "dhcp6": False}}}) + "\n"


def build_iso(spec: ConfigDriveSpec) -> bytes:
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    files = {"user-data": user_data(spec), "meta-data": meta_data(spec),
             "network-config": network_config(spec)}
    for n, (name, text) in enumerate(files.items()):
        data = text.encode()
        iso.add_fp(io.BytesIO(data), len(data), f"/FILE{n}.;1", rr_name=name,
                   joliet_path=f"/{name}")
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()


def read_iso(data: bytes) -> dict[str, str]:
    """The files of a config drive by name (for tests and the operator's inspection)."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    try:
        if iso.pvd.volume_identifier.decode().strip() != "cidata":
            raise ValueError("not a NoCloud config drive (volume label is not 'cidata')")
        out = {}
        for name in ("user-data", "meta-data", "network-config"):
            buf = io.BytesIO()
            iso.get_file_from_iso_fp(buf, joliet_path=f"/{name}")
            out[name] = buf.getvalue().decode()
        return out
    finally:
        iso.close()

from __future__ import annotations

import dataclasses
import json

import bcrypt
import pytest

from gpulease.configdrive import ConfigDriveSpec, build_iso, read_iso
from gpulease.testing.callers import ssh_key

SPEC = ConfigDriveSpec(instance_id="i-abc", hostname="train-01", ssh_keys=(ssh_key("me"),),
                       root_password="Corr3ct-horse", agent_url="https://gl.example.com",
                       agent_token="glat_one-time")


def test_config_drive_is_a_nocloud_iso_with_the_instances_settings() -> None:
    files = read_iso(build_iso(SPEC))
    assert files["user-data"].startswith("#cloud-config\n")
    config = json.loads(files["user-data"].split("\n", 1)[1])
    assert config["hostname"] == "train-01"
    root = config["users"][0]
    assert root["ssh_authorized_keys"] == list(SPEC.ssh_keys)
    assert bcrypt.checkpw(b"Corr3ct-horse", root["hashed_passwd"].encode())
    assert "Corr3ct-horse" not in files["user-data"]  # only the hash travels
    assert ["LABEL=data", "/data", "ext4", "defaults,nofail", "0", "2"] in config["mounts"]
    env = config["write_files"][0]
    assert "GPULEASE_AGENT_TOKEN=glat_one-time" in env["content"]
    assert env["permissions"] == "0600"
    assert json.loads(files["meta-data"]) == {"instance-id": "i-abc",
                                              "local-hostname": "train-01"}
    assert json.loads(files["network-config"])["version"] == 2


def test_the_data_disk_is_the_one_the_server_has() -> None:
    def setup(spec: ConfigDriveSpec) -> dict[str, object]:
        return json.loads(read_iso(build_iso(spec))["user-data"].split("\n", 1)[1])

    assert list(setup(SPEC)["disk_setup"]) == ["/dev/nvme1n1"]  # a GPU server's second NVMe
    lab = setup(dataclasses.replace(SPEC, data_disk_device="/dev/vdb"))  # a lab VM's
    assert list(lab["disk_setup"]) == ["/dev/vdb"]
    assert lab["fs_setup"] == [{"label": "data", "filesystem": "ext4", "device": "/dev/vdb",
                                "partition": "auto"}]


def test_a_fabric_nic_is_brought_up_without_dhcp_and_the_rest_ask_dhcp() -> None:
    plain = read_iso(build_iso(SPEC))
    assert json.loads(plain["network-config"])["ethernets"]["all"]["dhcp4"] is True
    fabric = read_iso(build_iso(dataclasses.replace(SPEC, fabric_nic="eth1")))
    nets = json.loads(fabric["network-config"])["ethernets"]
    assert nets == {"eth0": {"dhcp4": True, "dhcp6": False},
                    "eth1": {"dhcp4": False, "dhcp6": False}}
    config = json.loads(fabric["user-data"].split("\n", 1)[1])
    assert config["bootcmd"] == [["ip", "link", "set", "dev", "eth1", "up"]]


def test_a_foreign_iso_is_refused() -> None:
    import io

    import pycdlib

    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, vol_ident="OTHER")
    out = io.BytesIO()
    iso.write_fp(out)
    with pytest.raises(ValueError, match="cidata"):
        read_iso(out.getvalue())


def test_a_platform_deploys_drive_carries_no_credential_of_the_tenants() -> None:
    """The platform's deploys: root locked with no key until the node passed its
    acceptance (the agent's configure puts them in place)."""
    drive = dataclasses.replace(SPEC, ssh_keys=(), root_password=None)
    files = read_iso(build_iso(drive))
    config = json.loads(files["user-data"].split("\n", 1)[1])
    assert config["users"] == [{"name": "root", "lock_passwd": True}]
    assert "ssh-ed25519" not in files["user-data"] and "$2b$" not in files["user-data"]

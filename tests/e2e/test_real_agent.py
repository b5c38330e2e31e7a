"""The real agent end to end: a `gpulease agent` process (simulated GPUs, real loop-device
disks) enrolls with the token from the config drive (which holds no key or password of the
tenant's), answers the control plane's verify, configure (the tenant's key and password put
in place once the node passed) and erase commands, and its figures and certificates reach
the tenant. SQLite and
PostgreSQL."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import httpx
import pytest
from sqlalchemy import select, update

from gpulease.configdrive import read_iso
from gpulease.db.tables import ConfigDrive, Node
from gpulease.domain.catalog import DEFAULT_CATALOG, parse_catalog
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import drive_token
from gpulease.testing.servers import LiveServer, free_port
from gpulease.worker.runner import Worker

pytestmark = pytest.mark.slow


def wait_for(check: Callable[[], object], timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture
def real_node(fleet: Platform) -> Iterator[str]:
    """One H100 node in ningxia-1 driven by the real agent; the demo's are out of service.
    The offer's fio mark is lowered to what a loop device on this machine gives."""
    data = tomllib.loads(DEFAULT_CATALOG.read_text())
    h100 = next(sku for sku in data["skus"] if sku["id"] == "h100-80g-x8")
    h100["acceptance"]["fio_randread_iops"] = "1000"
    fleet.catalog = parse_catalog(data, "test catalog")
    with fleet.db.write() as s:
        s.execute(update(Node).where(Node.sku == "h100-80g-x8").values(status="maintenance"))
        add_node(s, fleet, NodeSpec(name="real-01", sku="h100-80g-x8", region="ningxia-1",
                                    agent_kind="gpulease"))
    yield "real-01"


def test_real_agent_delivers_verifies_and_erases(
    fleet: Platform, real_node: str, server: LiveServer, tenant: TenantCtx, key: str,
    loop_device: Callable[[int], str], need_fio: None, tmp_path: Path,  # noqa: F811
) -> None:
    fio_disk, data_disk = loop_device(128), loop_device(32)
    worker = Worker(fleet)
    worker.start(threads=2)
    agent: subprocess.Popen[str] | None = None
    api, headers = f"{server.url}/api/v1", {"Authorization": f"Bearer {tenant.token}"}
    try:
        iid = orders.place_order(fleet, tenant.principal, OrderRequest(
            sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id

        def drive() -> bytes | None:
            with fleet.db.read() as s:
                return s.scalar(select(ConfigDrive.iso))

        user_data = read_iso(wait_for(drive, 30, "the config drive"))["user-data"]  # type: ignore[arg-type]
        token = re.search(r"GPULEASE_AGENT_TOKEN=(glat_[A-Za-z0-9_-]+)", user_data)
        assert token, user_data
        assert "ssh_authorized_keys" not in user_data and "hashed_passwd" not in user_data
        env = tmp_path / "agent.env"
        env.write_text(f"GPULEASE_URL={server.url}\nGPULEASE_AGENT_TOKEN={token.group(1)}\n")
        system = tmp_path / "system"  # the installed system the handover writes into
        (system / "etc").mkdir(parents=True)
        (system / "etc" / "shadow").write_text("root:!:20000:0:99999:7:::\n"
                                               "daemon:*:20000:0:99999:7:::\n")
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpulease.cli.main", "agent", "--backend", "simulated",
             "--listen", f"127.0.0.1:{free_port()}", "--control-plane", server.url,
             "--enroll-token-file", str(env), "--credential-file", str(tmp_path / "cred"),
             "--command-poll", "0.2", "--push-interval", "1", "--fio-target", fio_disk,
             "--erase-device", data_disk, "--allow-erase", "--burnin", "2", "--fio-runtime", "1",
             "--system-root", str(system)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def status() -> str | None:
            assert agent is not None and agent.poll() is None, (
                agent.stdout.read() if agent and agent.stdout else "")
            inst = httpx.get(f"{api}/instances/{iid}", headers=headers).json()
            return inst["status"] if inst["status"] in ("ready", "failed") else None

        wait_for(status, 90, "delivery")
        inst = httpx.get(f"{api}/instances/{iid}", headers=headers).json()
        if inst["status"] != "ready":
            agent.terminate()
            raise AssertionError(f"{inst['status_reason']}; agent said: "
                                 f"{agent.communicate(timeout=10)[0][-3000:]}")
        assert inst["ip_address"] == "127.0.0.1"  # reported by the agent
        # the tenant's key and password put in place at configure, after the acceptance
        keys = (system / "root" / ".ssh" / "authorized_keys").read_text()
        assert keys.split()[:2] == key.split()[:2]
        password = httpx.post(f"{api}/instances/{iid}/credentials", headers=headers).json()
        (root, daemon) = (system / "etc" / "shadow").read_text().splitlines()
        assert bcrypt.checkpw(password["root_password"].encode(), root.split(":")[1].encode())
        assert daemon == "daemon:*:20000:0:99999:7:::"
        assert inst["nodes"][0]["name"] == real_node
        (report,) = httpx.get(f"{api}/instances/{iid}/acceptance",
                              headers=headers).json()["items"]
        assert report["passed"] and report["trigger"] == "delivery"
        fio = next(c for c in report["report"]["checks"] if c["name"] == "fio_randread_4k")
        assert fio["value"] > 1000 and fio["detail"] == fio_disk  # fio ran for real
        # on demand, again through the agent
        runs = httpx.post(f"{api}/instances/{iid}/verify", headers=headers).json()
        assert [r["status"] for r in runs] == ["queued"]
        wait_for(lambda: httpx.get(f"{api}/instances/{iid}/acceptance",
                                   headers=headers).json()["total"] == 2, 60, "on-demand report")
        # the tenant's data on the disk, then release: the agent erases it for real
        with open(data_disk, "r+b") as f:
            f.write(b"secret checkpoint " * 100_000)
        httpx.post(f"{api}/instances/{iid}/release", headers=headers)
        # The release ended the tenant-time credential; the server reboots into the
        # cleaning ramdisk, whose agent enrolls with the token on the cleaning drive (here:
        # the same process, handed the new token as the ramdisk would find it).
        cleaning = wait_for(lambda: (t := drive_token(fleet, real_node)) != token.group(1)
                            and t, 60, "the cleaning drive")
        env.write_text(f"GPULEASE_URL={server.url}\nGPULEASE_AGENT_TOKEN={cleaning}\n")

        def released() -> bool:
            return httpx.get(f"{api}/instances/{iid}", headers=headers).json()[
                "status"] == "released"

        wait_for(released, 90, "release")
        (cert,) = httpx.get(f"{api}/instances/{iid}/erase-certificates",
                            headers=headers).json()["items"]
        assert cert["device"] == data_disk and cert["method"] == "discard+overwrite"
        assert cert["passed"] and not cert["simulated"]
        assert cert["certificate"]["lease"] == iid
        with open(data_disk, "rb") as f:
            assert f.read().count(0) == 32 * 2**20
        with fleet.db.read() as s:
            node = s.scalar(select(Node).where(Node.name == real_node))
            assert node is not None and node.status == "available"
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(10)
        worker.stop()

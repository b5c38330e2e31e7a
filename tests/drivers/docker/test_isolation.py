"""Tenants' containers on one shared server, on the real Docker engine: a tenant is root in
its container and a stranger to its neighbours. Each tenant gets a network of its own (its
containers reach each other, another tenant's do not, and the host's guard is what says
no), the offer's share of the host as limits, a reduced capability set with
no-new-privileges, a data volume that goes with the instance, no engine socket, and SSH by
key unless the order asked for a password."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.errors import NotFound

from gpulease.compose import make_platform
from gpulease.drivers import bridge_guard
from gpulease.drivers.docker_runtime import (
    BRIDGE_OPTION,
    CAPABILITIES,
    bridge_name,
    container_name,
    network_name,
    volume_name,
)
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx, new_tenant
from gpulease.testing.platforms import database_url, make_settings
from gpulease.worker.runner import Worker
from tests.drivers.docker.engine import (
    ENGINE,
    IMAGE,
    remove_node_containers,
)
from tests.fixtures.docker import DEFAULT_IMAGE, _key_pair

pytestmark = pytest.mark.slow
NODE = "shared-isolation-1"
CAP_NET_RAW, CAP_MKNOD, CAP_SYS_ADMIN = 13, 27, 21


@pytest.fixture
def shared_host(tmp_path: Path, engine: docker.DockerClient) -> Iterator[Platform]:
    with database_url("sqlite", tmp_path) as url:  # the engine's side: any database will do
        p = make_platform(make_settings(
            url, tmp_path / "data", container_images={DEFAULT_IMAGE: IMAGE},
            container_gpus="none"))
        p.db.migrate()
        with p.db.write() as s:
            add_node(s, p, NodeSpec(name=NODE, sku="rtx4090-24g-x8", region="sichuan-2",
                                    pool="container", runtime_url=ENGINE))
        yield p
        remove_node_containers(engine, NODE)
        p.db.dispose()


def _order(p: Platform, t: TenantCtx, key: str, **kw: object) -> str:
    view, _ = orders.place_order(p, t.principal, OrderRequest(
        kind="container", offer="rtx4090-24g-container", ssh_keys=[key], **kw))  # type: ignore[arg-type]
    return view.id


def _sh(engine: docker.DockerClient, iid: str, script: str) -> tuple[int, str]:
    code, out = engine.containers.get(container_name(iid)).exec_run(["bash", "-c", script])
    return code, out.decode(errors="replace").strip()


def _address(engine: docker.DockerClient, iid: str) -> str:
    networks = engine.containers.get(container_name(iid)).attrs["NetworkSettings"]["Networks"]
    (settings,) = networks.values()
    return str(settings["IPAddress"])


def _reaches(engine: docker.DockerClient, source: str, target: str) -> bool:
    probe = f"echo > /dev/tcp/{_address(engine, target)}/22"
    code, _ = _sh(engine, source, f"timeout 3 bash -c '{probe}'")
    return code == 0


def _guard_drops() -> int:
    """Packets the host's guard dropped so far, both families (the engine fixture applies
    it, as an operator does on a container host)."""
    total = 0
    for family in bridge_guard.FAMILIES:
        listing = subprocess.run(
            [family, "-w", "-t", bridge_guard.TABLE, "-L", bridge_guard.CHAIN, "-v", "-x",
             "-n"], capture_output=True, text=True, check=True).stdout
        total += sum(int(line.split()[0]) for line in listing.splitlines()
                     if " DROP " in f" {line} ")
    return total


def _offered_methods(key: Path, port: int) -> str:
    """What sshd offers after the key is refused: the list in 'Permission denied (…)'."""
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(
            ["ssh", "-p", str(port), "-o", "StrictHostKeyChecking=no", "-o",
             "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
             "-o", "IdentitiesOnly=yes", "-i", str(key), "-o", "LogLevel=ERROR",
             "root@127.0.0.1", "true"], capture_output=True, text=True, timeout=30)
        if "Permission denied" in done.stderr or time.monotonic() > deadline:
            return done.stderr
        time.sleep(0.5)


def test_tenants_containers_are_kept_apart_and_limited(
    shared_host: Platform, engine: docker.DockerClient, tmp_path: Path
) -> None:
    p = shared_host
    alice, bob = new_tenant(p), new_tenant(p)
    key_path, key = _key_pair(tmp_path)
    a1 = _order(p, alice, key, gpus=2)
    a2 = _order(p, alice, key, gpus=1)
    b1 = _order(p, bob, key, gpus=1, ssh_password=True)
    ordered = ((a1, alice), (a2, alice), (b1, bob))
    # a container the engine was slow to start (a loaded CI host) is retried after a
    # backoff, which run_until_idle does not wait for: wait for it, within a bound
    deadline = time.monotonic() + 120
    while True:
        Worker(p, owner="isolation-test").run_until_idle()
        views = [instances.show_instance(p, who.principal, iid) for iid, who in ordered]
        if all(v.status == "ready" for v in views) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for view in views:
        assert view.status == "ready", (view.status, view.status_reason)

    # A network per tenant: Alice's containers reach each other, Bob's is out of reach.
    a_net = engine.containers.get(container_name(a1)).attrs["NetworkSettings"]["Networks"]
    assert list(a_net) == [network_name(alice.tenant_id)]
    assert list(engine.containers.get(container_name(b1)).attrs["NetworkSettings"]["Networks"]
                ) == [network_name(bob.tenant_id)]
    deadline = time.monotonic() + 20  # sshd listens a moment after the container starts
    while not _reaches(engine, a1, a2) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _reaches(engine, a1, a2)
    # The host's guard is what refuses them (it comes before the engine's own rules, which
    # the engine rewrites whenever a network comes or goes): its drops count the probes.
    for who in (alice, bob):
        bridge = engine.networks.get(network_name(who.tenant_id)).attrs["Options"]
        assert bridge[BRIDGE_OPTION] == bridge_name(who.tenant_id)
    dropped = _guard_drops()
    assert not _reaches(engine, a1, b1)
    assert not _reaches(engine, b1, a2)
    assert _guard_drops() >= dropped + 2

    # The offer's share of the host (128 cores, 512 GB, 8 GPUs): per GPU 16 CPUs (no more
    # than this engine has), 64 GiB and 4096 processes.
    host = engine.containers.get(container_name(a1)).attrs["HostConfig"]
    ncpu = engine.info()["NCPU"]
    assert host["Memory"] == host["MemorySwap"] == 2 * 64 * 2**30
    assert host["NanoCpus"] == min(32, ncpu) * 10**9
    assert host["PidsLimit"] == 2 * 4096
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and set(host["CapAdd"]) == set(CAPABILITIES)
    assert "no-new-privileges:true" in host["SecurityOpt"]
    # Seen from inside: no raw sockets, no mknod, no admin; no new privileges; no engine.
    _, status = _sh(engine, a1, "grep -E '^(CapBnd|NoNewPrivs):' /proc/1/status")
    fields = dict(line.split(":\t") for line in status.splitlines())
    bounding = int(fields["CapBnd"], 16)
    assert not bounding & (1 << CAP_NET_RAW | 1 << CAP_MKNOD | 1 << CAP_SYS_ADMIN)
    assert fields["NoNewPrivs"].strip() == "1"
    code, _ = _sh(engine, a1, "test -e /var/run/docker.sock || test -e /run/docker.sock")
    assert code != 0
    mounts = engine.containers.get(container_name(a1)).attrs["Mounts"]
    assert [(m["Type"], m["Name"], m["Destination"]) for m in mounts] == [
        ("volume", volume_name(a1), "/data")]

    # SSH: keys only unless the order asked for the password.
    (tmp_path / "other").mkdir()
    other_key, _ = _key_pair(tmp_path / "other")  # a key the instances do not know
    ports = {iid: int(str(instances.show_instance(p, who.principal, iid).ssh_command)
                      .split("-p ")[1].split()[0]) for iid, who in ((a1, alice), (b1, bob))}
    keys_only = _offered_methods(other_key, ports[a1])
    assert "Permission denied (publickey)" in keys_only, keys_only
    with_password = _offered_methods(other_key, ports[b1])
    assert "password" in with_password, with_password
    assert instances.show_instance(p, bob.principal, b1).ssh_password is True
    assert "keys only" in actions.reveal_credentials(p, alice.principal, a1).note

    # The data volume holds the tenant's files while the instance runs and goes with it;
    # the tenant's network stays while another of its containers runs, then goes too.
    assert _sh(engine, a1, "echo model > /data/weights && cat /data/weights") == (0, "model")
    actions.release_instance(p, alice.principal, a1)
    Worker(p, owner="isolation-test").run_until_idle()
    with pytest.raises(NotFound):
        engine.volumes.get(volume_name(a1))
    engine.networks.get(network_name(alice.tenant_id))  # a2 still runs on it
    actions.release_instance(p, alice.principal, a2)
    Worker(p, owner="isolation-test").run_until_idle()
    with pytest.raises(NotFound):
        engine.networks.get(network_name(alice.tenant_id))
    engine.networks.get(network_name(bob.tenant_id))  # Bob's is untouched

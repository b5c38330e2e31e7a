"""Container instances on a real Docker engine, through orders and the worker, on SQLite
and PostgreSQL: the tenant logs in over SSH with their key, the GPUs are the ones held,
a repeated start finds the same container, release removes it, and a missing image fails
the order with a reason instead of retrying."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

import bcrypt
import docker
import pytest
from docker.errors import NotFound

from gpulease.db.claims import take
from gpulease.db.tables import Instance
from gpulease.drivers.docker_runtime import DockerRuntime, container_name
from gpulease.platform import Platform
from gpulease.ports.runtime import ContainerSpec
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions, power
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.testing.servers import free_port
from gpulease.worker.pipelines import containers
from gpulease.worker.pipelines.base import claim_due
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_runtime
from gpulease.worker.runner import Worker
from tests.drivers.docker.engine import (
    ENGINE,
)
from tests.fixtures.docker import DEFAULT_IMAGE, _key_pair, _order, _ssh

pytestmark = pytest.mark.slow


def test_a_container_instance_runs_on_the_docker_engine(
    docker_platform: Platform, engine: docker.DockerClient, tmp_path: Path, node: str
) -> None:
    p = docker_platform
    tenant = new_tenant(p)
    private, public = _key_pair(tmp_path)
    _order(p, tenant, public, gpus=3)  # a neighbour: the next slice is not GPUs 0-2
    iid = _order(p, tenant, public, gpus=2)
    Worker(p, owner="docker-test").run_until_idle()
    view = instances.show_instance(p, tenant.principal, iid)
    assert view.status == "ready", view.status_reason
    assert view.ip_address == "127.0.0.1" and view.ssh_command
    port = int(view.ssh_command.split("-p ")[1].split()[0])

    container = engine.containers.get(container_name(iid))
    assert container.status == "running"
    assert container.labels["io.gpulease.gpus"] == ",".join(map(str, view.nodes[0].gpus))
    assert view.nodes[0].gpus == [3, 4]

    # The tenant's key logs in (sshd takes a moment after the container starts).
    deadline = time.monotonic() + 30
    while (done := _ssh(private, port, "hostname; cat /root/.ssh/authorized_keys")
           ).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [iid, public]
    # The root password shown once is the container's; its hash file did not stay behind.
    password = actions.reveal_credentials(p, tenant.principal, iid).root_password
    shadow = container.exec_run(["sh", "-c", "getent shadow root | cut -d: -f2; "
                                 "ls /etc/gpulease"]).output.decode().split()
    assert shadow[0].startswith("$2b$") and len(shadow) == 1
    assert bcrypt.checkpw(password.encode(), shadow[0].encode())

    # The tenant's restart: its processes end, the container starts again, its files stay.
    container.exec_run(["sh", "-c", "echo kept > /root/marker"])
    started = container.attrs["State"]["StartedAt"]
    power.request_power(p, tenant.principal, iid, "restart")
    Worker(p, owner="docker-test").run_until_idle()
    assert power.power_actions(p, tenant.principal, iid).items[0].status == "done"
    container.reload()
    assert container.status == "running" and container.attrs["State"]["StartedAt"] != started
    assert container.exec_run(["cat", "/root/marker"]).output.decode().strip() == "kept"
    # the engine published SSH anew: the instance's ssh line follows it, and logs in
    shown = instances.show_instance(p, tenant.principal, iid).ssh_command or ""
    port = int(shown.split("-p ")[1].split()[0])
    assert str(port) == container.attrs["NetworkSettings"]["Ports"]["22/tcp"][0]["HostPort"]
    deadline = time.monotonic() + 30
    while (done := _ssh(private, port, "cat /root/marker")).returncode != 0 and (
            time.monotonic() < deadline):
        time.sleep(0.5)
    assert done.stdout.strip() == "kept", done.stderr

    # A start repeated (a worker that died after the engine answered) finds the container.
    runtime = p.drivers.docker
    assert isinstance(runtime, DockerRuntime)
    again = runtime.start(ContainerSpec(iid, node, (3, 4), DEFAULT_IMAGE,
                                        (public,), ENGINE))
    assert again.container_id == container.id and again.ssh_port == port

    actions.release_instance(p, tenant.principal, iid)
    Worker(p, owner="docker-test").run_until_idle()
    assert instances.show_instance(p, tenant.principal, iid).status == "released"
    with pytest.raises(NotFound):
        engine.containers.get(container_name(iid))
    # Stopping what is gone is a no-op.
    runtime.stop(iid, node, ENGINE)


def test_an_image_missing_on_the_host_fails_the_order_with_the_reason(
    docker_platform: Platform, engine: docker.DockerClient, node: str
) -> None:
    p = docker_platform
    tenant = new_tenant(p)
    iid = _order(p, tenant, ssh_key(), gpus=1, image="ubuntu22.04-base")
    Worker(p, owner="docker-test").run_until_idle()
    view = instances.show_instance(p, tenant.principal, iid)
    assert view.status == "failed"
    assert f"image 'gpulease/ubuntu22.04-base' is not on {node}" in (
        view.status_reason or "")
    assert "load or pull it there" in (view.status_reason or "")
    # The order never reached the tenant: its first hour's hold went back.
    assert wallet.show_wallet(p, tenant.principal).balance == Decimal("100000000.00")


def test_an_unreachable_engine_is_retried_then_fails_the_order_with_the_reason(
    platform: Platform, key: str
) -> None:
    dead = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with platform.db.write() as s:
        add_node(s, platform, NodeSpec(name="shared-dead-1", sku="rtx4090-24g-x8",
                                       region="sichuan-2", pool="container", runtime_url=dead))
    tenant = new_tenant(platform)
    iid = _order(platform, tenant, key, gpus=1)
    worker = Worker(platform, owner="docker-test")
    deadline = time.monotonic() + 30
    while (view := instances.show_instance(platform, tenant.principal, iid)
           ).status == "pending" and time.monotonic() < deadline:
        worker.step() or time.sleep(0.01)  # through the backoff between tries
    assert view.status == "failed"
    assert "container start failed" in (view.status_reason or "")
    assert "Docker engine of shared-dead-1" in (view.status_reason or "")
    with platform.db.read() as s:  # retried with backoff first (max_attempts = 4 in tests)
        assert s.get(Instance, iid).attempts == 4  # type: ignore[union-attr]
    # Its GPU stays held while the engine cannot say whether a container is left there;
    # the release is retried until it answers.
    assert view.nodes[0].status == "available" and view.nodes[0].gpus == [0]


def test_a_worker_frozen_after_its_check_creates_no_container(
    docker_platform: Platform, engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence's check passed; the worker froze past its lock inside the engine call (after
    it looked for the container) and was taken over: when it wakes, the create it would send
    asks the fence again and is not sent."""
    p = docker_platform
    tenant = new_tenant(p)
    iid = _order(p, tenant, ssh_key(), gpus=1)
    with p.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None
        spec = containers.container_spec(s, p, inst)
    (held,) = claim_due(p, Instance, "a", extra=[Instance.id == iid], due=False)
    fence = Fence(p, held)
    real_find = DockerRuntime._find

    def find_then_freeze(self: DockerRuntime, client: docker.DockerClient, instance_id: str
                         ) -> object:
        found = real_find(self, client, instance_id)
        with p.db.write() as s:  # asleep past its lock: another worker took the instance
            row = s.get(Instance, held.id)
            assert row is not None
            take(row)
        fence.fresh_until = time.monotonic() - 1
        return found

    monkeypatch.setattr(DockerRuntime, "_find", find_then_freeze)
    with pytest.raises(Fenced, match="no longer holds"):
        fenced_runtime(p.drivers.runtime_for(ENGINE), fence).start(spec)
    with pytest.raises(NotFound):
        engine.containers.get(container_name(iid))  # nothing was created

"""Commands to a real node agent, with the agent played by the test through the same
service calls its HTTP endpoints make. SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from gpulease.agent.erase import simulated_certificates
from gpulease.agent.gpu.checks import simulated_node_report
from gpulease.agent.phonehome import keys_missing
from gpulease.db.claims import take
from gpulease.db.tables import AgentCommand, Node
from gpulease.domain.errors import InvalidInput, NotFound, Unauthorized
from gpulease.platform import Platform
from gpulease.ports.agent import (
    BackupCommand,
    Command,
    CommandOutcome,
    CommandProgress,
    ConfigureCommand,
    RestoreCommand,
    VerifyCommand,
    VerifyResult,
)
from gpulease.schemas import OrderRequest
from gpulease.services.agents import (
    commands as agent_commands,
)
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.agents import evidence
from gpulease.services.agents import (
    node_agent as node_agents,
)
from gpulease.services.fleet.inventory import NodeSpec, add_node
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.orders import ordering as orders
from gpulease.services.telemetry import pushes
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import drive_token, node_by_name
from gpulease.worker.pipelines.base import claim_due
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_agent
from gpulease.worker.runner import Worker

Handler = Callable[[Command], CommandOutcome]


def healthy(cmd: Command) -> CommandOutcome:
    if isinstance(cmd, ConfigureCommand):
        return CommandOutcome(ok=True, result={"ip_address": "10.1.2.3"})
    if isinstance(cmd, VerifyCommand):
        report = simulated_node_report("real-01", [], cmd.payload.thresholds, cmd.payload.spec)
        return CommandOutcome(ok=True, result=VerifyResult.of(report).model_dump(mode="json"))
    # the erase: a certificate per disk (none would leave the node out of the pool)
    return CommandOutcome(ok=True, result={"certificates": [
        c.as_dict() for c in simulated_certificates("real-01", None)]})


class AgentOn:
    """The node's agent as the test plays it: its credential, renewed as a real one is,
    from the one-time token on the node's config drive once the control plane ended the
    old one (each deploy and each release does)."""

    def __init__(self, p: Platform, node: str, credential: str) -> None:
        self.p, self.node, self.credential = p, node, credential
        self.enrollments = 0

    def fetch(self) -> list[Command]:
        try:
            return agent_commands.fetch(self.p, self.credential)
        except Unauthorized:
            token = drive_token(self.p, self.node)
            if token is None:
                return []  # no drive yet: the machine has not booted its new system
            _, self.credential = agent_credentials.register(self.p, token, self.node, None, {})
            self.enrollments += 1
            return agent_commands.fetch(self.p, self.credential)


def drive(p: Platform, worker: Worker, agent: AgentOn, handler: Handler,
          done: Callable[[], bool], timeout: float = 60) -> list[str]:
    """Run the worker and answer the agent's commands until `done()`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"stuck; commands so far {seen}"
        worker.step()
        for cmd in agent.fetch():
            seen.append(cmd.kind)
            agent_commands.post_result(p, agent.credential, cmd.id, handler(cmd))
        time.sleep(0.01)
    return seen


@pytest.fixture
def real(fleet: Platform, operator: TenantCtx) -> tuple[str, AgentOn]:
    with fleet.db.write() as s:
        s.execute(update(Node).where(Node.sku == "h100-80g-x8").values(status="maintenance"))
        add_node(s, fleet, NodeSpec(name="real-01", sku="h100-80g-x8", region="ningxia-1",
                                    agent_kind="gpulease"))
    token = agent_credentials.operator_enrollment(fleet, operator.principal, "real-01")
    _, credential = agent_credentials.register(fleet, token, "real-01", None, {})
    return "real-01", AgentOn(fleet, "real-01", credential)


def order(p: Platform, t: TenantCtx, key: str) -> str:
    return orders.place_order(p, t.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id


def status(p: Platform, t: TenantCtx, iid: str) -> str:
    return instances.show_instance(p, t.principal, iid).status


def test_delivery_and_release_through_commands(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str, real: tuple[str, AgentOn]
) -> None:
    name, agent = real
    before = agent.credential
    iid = order(fleet, tenant, key)
    seen = drive(fleet, worker, agent, healthy,
                 lambda: status(fleet, tenant, iid) in ("ready", "failed"))
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert view.status == "ready" and view.ip_address == "10.1.2.3"
    assert seen == ["verify", "configure"]  # the keys only on a node that passed
    assert view.simulated  # its BMC is the simulated one; its agent answered commands
    # The deploy ended the credential from before; the new system's agent enrolled with
    # the token on its config drive, which is spent and gone with the drive.
    assert agent.enrollments == 1 and agent.credential != before
    with pytest.raises(Unauthorized):
        agent_commands.fetch(fleet, before)
    tenants = agent.credential  # the tenant is root there: assume they copied it
    actions.release_instance(fleet, tenant.principal, iid)
    seen = drive(fleet, worker, agent, healthy,
                 lambda: status(fleet, tenant, iid) == "released")
    assert seen == ["erase"]
    assert node_by_name(fleet, name).status == "available"
    # Released: the tenant's copy is refused; the cleaning ramdisk's ended with the erase.
    assert agent.enrollments == 2
    for credential in (tenants, agent.credential):
        with pytest.raises(Unauthorized):
            pushes.ingest(fleet, credential, [])


def test_agent_refusing_to_erase_keeps_the_node_out_of_stock(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str, real: tuple[str, AgentOn]
) -> None:
    name, agent = real
    iid = order(fleet, tenant, key)
    drive(fleet, worker, agent, healthy, lambda: status(fleet, tenant, iid) == "ready")
    actions.release_instance(fleet, tenant.principal, iid)

    def refuse(cmd: Command) -> CommandOutcome:
        return CommandOutcome(ok=False, error="RuntimeError: started without --allow-erase")

    drive(fleet, worker, agent, refuse,
          lambda: node_by_name(fleet, name).status == "maintenance")
    reason = node_by_name(fleet, name).status_reason or ""
    assert "disks not certified erased" in reason and "--allow-erase" in reason


def test_failed_verification_report_moves_nothing_when_no_spare(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str, real: tuple[str, AgentOn]
) -> None:
    name, agent = real
    iid = order(fleet, tenant, key)

    def slow_gpu(cmd: Command) -> CommandOutcome:
        if not isinstance(cmd, VerifyCommand):
            return healthy(cmd)
        report = simulated_node_report(name, ["slow-gpu:4"], cmd.payload.thresholds,
                                       cmd.payload.spec)
        return CommandOutcome(ok=True, result=VerifyResult.of(report).model_dump(mode="json"))

    drive(fleet, worker, agent, slow_gpu, lambda: status(fleet, tenant, iid) == "failed")
    view = instances.show_instance(fleet, tenant.principal, iid)
    assert "acceptance failed" in (view.status_reason or "")
    assert node_by_name(fleet, name).status == "maintenance"


def test_results_are_checked(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str, real: tuple[str, AgentOn],
    operator: TenantCtx,
) -> None:
    name, agent = real
    iid = order(fleet, tenant, key)
    drive(fleet, worker, agent, healthy, lambda: status(fleet, tenant, iid) == "ready")
    (run,) = node_agents.verify_now(fleet, tenant.principal, iid)
    assert run.status == "queued" and run.command is not None
    (cmd,) = agent.fetch()
    assert cmd.id == run.command
    credential = agent.credential
    other_token = agent_credentials.operator_enrollment(fleet, operator.principal,
                                             "sim-h100-80g-x8-ningxia-1-01")
    _, other = agent_credentials.register(fleet, other_token, "x", None, None)
    with pytest.raises(NotFound):
        agent_commands.post_result(fleet, other, cmd.id, CommandOutcome(ok=True, result={}))
    with pytest.raises(InvalidInput, match="verify result is not understood"):
        agent_commands.post_result(fleet, credential, cmd.id,
                                   CommandOutcome(ok=True, result={"checks": 1}))
    agent_commands.post_result(fleet, credential, cmd.id, healthy(cmd))
    agent_commands.post_result(fleet, credential, cmd.id,  # a late repeat is ignored
                               CommandOutcome(ok=False, error="late"))
    reports = evidence.acceptance_reports(fleet, tenant.principal, iid)
    assert [(r["trigger"], r["passed"]) for r in reports] == [("delivery", True),
                                                              ("on_demand", True)]


def test_a_backup_and_a_restore_through_the_real_agents_commands(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str, real: tuple[str, AgentOn],
    tmp_path: Path,
) -> None:
    """The real agent's side (agent/backup.run_transfer, as `gpulease agent` runs it) on a
    data disk of its own, against the real S3 server, through fetched commands."""
    from gpulease.agent.backup import run_transfer
    from gpulease.db.ops_tables import Backup
    from gpulease.drivers.seaweedfs import start_embedded_s3
    from gpulease.schemas.fleet import BackupRequest, RestoreRequest
    from gpulease.services.storage import backups

    name, agent = real
    iid = order(fleet, tenant, key)
    drive(fleet, worker, agent, healthy, lambda: status(fleet, tenant, iid) == "ready")
    data = tmp_path / "data"
    (data / "checkpoints").mkdir(parents=True)
    (data / "checkpoints" / "step-1.pt").write_bytes(b"w" * 50_000)
    s3 = start_embedded_s3(tmp_path / "s3")
    try:
        fleet.settings.s3_endpoint = s3.url
        fleet.settings.s3_access_key, fleet.settings.s3_secret_key = (s3.access_key,
                                                                      s3.secret_key)

        def on_disk(cmd: Command) -> CommandOutcome:
            if isinstance(cmd, BackupCommand | RestoreCommand):
                assert cmd.payload.secret_access_key  # delivered to the agent, sealed at rest
                return CommandOutcome(ok=True, result=run_transfer(data, cmd.payload)
                                      .model_dump(mode="json"))
            return healthy(cmd)

        run = backups.request(fleet, tenant.principal, iid, BackupRequest())
        worker.step()  # started: the command waits for the agent
        (cmd,) = agent.fetch()
        assert isinstance(cmd, BackupCommand)
        agent_commands.post_progress(fleet, agent.credential, cmd.id,
                                     CommandProgress(moved=20_000, total=50_000))
        with fleet.db.write() as s:  # its next poll, now
            s.execute(update(Backup).values(next_attempt_at=None))
        worker.step()
        going = backups.show_run(fleet, tenant.principal, iid, run.id)
        assert (going.status, going.bytes_moved, going.bytes_total) == (
            "running", 20_000, 50_000)
        agent_commands.post_result(fleet, agent.credential, cmd.id, on_disk(cmd))
        drive(fleet, worker, agent, on_disk, lambda: backups.show_run(
            fleet, tenant.principal, iid, run.id).status in ("succeeded", "failed"))
        made = backups.show_run(fleet, tenant.principal, iid, run.id)
        assert made.status == "succeeded" and made.files == 1
        assert made.bytes_moved == made.bytes_total == 50_000
        (data / "checkpoints" / "step-1.pt").write_bytes(b"lost")
        back = backups.request(fleet, tenant.principal, iid,
                               RestoreRequest(snapshot_id=made.snapshot_id or ""))
        drive(fleet, worker, agent, on_disk, lambda: backups.show_run(
            fleet, tenant.principal, iid, back.id).status in ("succeeded", "failed"))
        assert backups.show_run(fleet, tenant.principal, iid, back.id).status == "succeeded"
        assert (data / "checkpoints" / "step-1.pt").read_bytes() == b"w" * 50_000
    finally:
        s3.stop(grace_s=3)  # its data goes with the test


@pytest.mark.parametrize(("said", "why"), [
    ({"hostname": "somebody-else"}, "did not boot with this order's config drive"),
    ({"keys_missing": 1}, "1 of the order's SSH keys are not in root's authorized_keys"),
])
def test_an_installed_system_configured_otherwise_fails_the_deploy(
    fleet: Platform, tenant: TenantCtx, worker: Worker, key: str,
    real: tuple[str, AgentOn], said: dict[str, object], why: str,
) -> None:
    """cloud-init ran on the installed system; its agent reports what it was configured
    with: another hostname, or the order's keys not in authorized_keys, fails the deploy."""
    _, agent = real
    iid = order(fleet, tenant, key)
    hostname = instances.show_instance(fleet, tenant.principal, iid).name or iid

    def otherwise(cmd: Command) -> CommandOutcome:
        if isinstance(cmd, ConfigureCommand):
            return CommandOutcome(ok=True, result={
                "ip_address": "10.1.2.3", "cloud_init": "done", "hostname": hostname,
                "keys_missing": 0, **said})
        return healthy(cmd)

    drive(fleet, worker, agent, otherwise, lambda: status(fleet, tenant, iid) == "failed")
    reason = instances.show_instance(fleet, tenant.principal, iid).status_reason or ""
    assert why in reason, reason


def test_keys_missing_counts_the_orders_keys_absent_from_authorized_keys(
        tmp_path: Path) -> None:
    authorized = tmp_path / "authorized_keys"
    authorized.write_text("ssh-ed25519 AAAAone first@host\nssh-rsa AAAAtwo\n")
    assert keys_missing(["ssh-ed25519 AAAAone other-comment", "ssh-rsa AAAAtwo x"],
                        authorized) == 0
    assert keys_missing(["ssh-ed25519 AAAAthree"], authorized) == 1
    assert keys_missing(["ssh-ed25519 AAAAone"], tmp_path / "absent") == 1


def test_a_worker_frozen_after_its_check_files_no_command(
        fleet: Platform, real: tuple[str, AgentOn], monkeypatch: pytest.MonkeyPatch) -> None:
    """The fence's check passed, then the worker froze past its lock and was taken over
    before it filed the erase: when it wakes, the filing asks again and nothing reaches the
    agent's queue."""
    name, agent = real
    (held,) = claim_due(fleet, Node, "a", extra=[Node.name == name], due=False)
    fence = Fence(fleet, held)
    real_check = Fence.check

    def check_then_freeze(self: Fence, call: str) -> None:
        real_check(self, call)
        if call == "erase":  # the step's check passed; asleep past the lock, taken over
            with fleet.db.write() as s:
                row = s.get(Node, held.id)
                assert row is not None
                take(row)
            self.fresh_until = time.monotonic() - 1

    monkeypatch.setattr(Fence, "check", check_then_freeze)
    erase = fenced_agent(agent_commands.CommandQueueAgent(fleet), fence).erase
    with pytest.raises(Fenced, match="no longer holds"):
        erase(node_agents.node_ref(fleet, node_by_name(fleet, name)))
    assert agent.fetch() == []  # the agent was sent nothing
    with fleet.db.read() as s:
        assert s.scalar(select(func.count()).select_from(AgentCommand)) == 0

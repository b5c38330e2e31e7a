"""Backups and restores the platform runs on a rented server, against the real S3 server
(SeaweedFS, as `gpulease up` runs it): the simulated server's data disk (a directory) goes
to the tenant's bucket as a snapshot through the worker and the node's agent with a key
minted for the run and deleted after; a restore puts it back, verified; bad paths, a
container, a second run at once are refused with what to do; a failure is retried, then
reported to the tenant. SQLite and PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest
from botocore.config import Config
from sqlalchemy import select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.money_tables import LeaseNotice
from gpulease.db.ops_tables import Backup
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.schemas.fleet import BackupRequest, RestoreRequest
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.storage import backups
from gpulease.services.storage import buckets as storage
from gpulease.services.support.replacement import Swap
from gpulease.testing.callers import TenantCtx
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.pipelines import backup_runs
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker
from tests.fixtures.storage import disk, hurry, iam_keys, with_storage


def admin_s3(s3: EmbeddedS3) -> Any:
    return boto3.client("s3", endpoint_url=s3.url, aws_access_key_id=s3.access_key,
                        aws_secret_access_key=s3.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def test_a_backup_and_a_restore_run_through_the_worker_and_the_nodes_agent(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me = tenant.principal
    with pytest.raises(Conflict, match="GPULEASE_S3_ENDPOINT"):
        backups.request(fleet, me, iid, BackupRequest())
    with_storage(fleet, s3)
    node = instances.show_instance(fleet, me, iid).nodes[0].name
    ckpt = disk(fleet, node) / "checkpoints"
    (ckpt / "step-200").mkdir(parents=True)
    (ckpt / "step-200" / "model.pt").write_bytes(os.urandom(2 << 20))
    (ckpt / "step-200" / "config.json").write_text('{"step": 200}')
    for bad in ("/etc", "/data/../etc", "checkpoints"):
        with pytest.raises(InvalidInput, match="data disk"):
            backups.request(fleet, me, iid, BackupRequest(path=bad))

    run = backups.request(fleet, me, iid, BackupRequest())
    assert (run.kind, run.status, run.node) == ("backup", "queued", node)
    with pytest.raises(Conflict, match="not finished yet"):
        backups.request(fleet, me, iid, BackupRequest())
    worker.run_until_idle()
    done = backups.show_run(fleet, me, iid, run.id)
    assert done.status == "succeeded", done.status_reason
    assert (done.files, done.bytes_total) == (2, (2 << 20) + len('{"step": 200}'))
    assert done.snapshot_id and done.bytes_moved == done.bytes_total
    bucket = storage.bucket_of(tenant.tenant_id)
    objects = admin_s3(s3).list_objects_v2(Bucket=bucket, Prefix=f"backups/{iid}/")
    keys = [o["Key"] for o in objects.get("Contents", [])]
    assert f"backups/{iid}/snapshots/{done.snapshot_id}.json" in keys
    assert iam_keys(s3, tenant.tenant_id) == []  # the run's key is gone
    with fleet.db.read() as s:
        row = s.get(Backup, run.id)
        assert row is not None and row.key_id is None and row.payload_enc is None

    # the tenant's work is lost; the snapshot brings it back, verified
    (ckpt / "step-200" / "model.pt").write_bytes(b"broken")
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token}
        r = CliRunner().invoke(app, ["restore", iid, done.snapshot_id, "--json"], env=env)
        assert r.exit_code == 0, r.output
        worker.run_until_idle()
        listed = CliRunner().invoke(app, ["backups", iid], env=env)
        assert listed.exit_code == 0 and done.snapshot_id in listed.output
        running = Worker(fleet, owner="threads")
        running.start(threads=1)
        try:
            again = CliRunner().invoke(app, ["backup", iid, "--wait"], env=env)
        finally:
            running.stop()
        assert again.exit_code == 0 and "succeeded" in again.output, again.output
    assert (ckpt / "step-200" / "model.pt").stat().st_size == 2 << 20
    runs = backups.list_runs(fleet, me, iid).items
    assert [r.kind for r in runs] == ["backup", "restore", "backup"]
    assert runs[0].bytes_moved == 0  # nothing new: nothing sent
    stages = [st.stage for st in instances.show_instance(fleet, me, iid).stages]
    assert "backup_done" in stages and "restore_done" in stages
    with pytest.raises(NotFound):
        backups.show_run(fleet, me, iid, "bk-000000000000")


def test_refusals_and_a_failing_run_retried_then_reported(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me = tenant.principal
    node = instances.show_instance(fleet, me, iid).nodes[0].name
    assert fleet.drivers.fleet is not None
    fleet.drivers.fleet.inject_fault(node, "agent_transfer", "transient", times=1)
    flaky = backups.request(fleet, me, iid, BackupRequest(path="/data"))
    drive(fleet, backup_runs.PIPELINE)
    retried = backups.show_run(fleet, me, iid, flaky.id)
    assert (retried.status, retried.attempts) == ("queued", 1)
    assert "connection reset" in (retried.status_reason or "")
    assert iam_keys(s3, tenant.tenant_id) == []  # the failed attempt's key went with it
    hurry(fleet, flaky.id)
    drive(fleet, backup_runs.PIPELINE)
    assert backups.show_run(fleet, me, iid, flaky.id).status == "succeeded"

    with pytest.raises(NotFound, match="No snapshot"):
        backups.request(fleet, me, iid, RestoreRequest(snapshot_id="20261201T000000Z-000000"))
    snapshot = backups.show_run(fleet, me, iid, flaky.id).snapshot_id
    admin_s3(s3).delete_object(Bucket=storage.bucket_of(tenant.tenant_id),
                               Key=f"backups/{iid}/snapshots/{snapshot}.json")
    missing = backups.request(fleet, me, iid, RestoreRequest(snapshot_id=f"{iid}/{snapshot}"))
    drive(fleet, backup_runs.PIPELINE)  # the agent itself reports the manifest gone: not retried
    failed = backups.show_run(fleet, me, iid, missing.id)
    assert failed.status == "failed" and "refused" in (failed.status_reason or "")
    with fleet.db.read() as s:
        kinds = list(s.scalars(select(LeaseNotice.kind).where(
            LeaseNotice.tenant_id == tenant.tenant_id)))
    assert "restore_failed" in kinds
    assert iam_keys(s3, tenant.tenant_id) == []

    actions.release_instance(fleet, me, iid)
    with pytest.raises(Conflict, match="delivered server"):
        backups.request(fleet, me, iid, BackupRequest())


def test_a_swap_copies_the_data_disk_through_the_bucket_before_the_faulty_one_is_erased(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    from gpulease.demo_agents import DemoAgents
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import replacement, tickets

    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me, op = tenant.principal, operator.principal
    old = instances.show_instance(fleet, me, iid).nodes[0].name
    work = disk(fleet, old) / "runs" / "llama-70b"
    work.mkdir(parents=True)
    weights = os.urandom(3 << 20)
    (work / "step-900.safetensors").write_bytes(weights)
    node_changes.inject_faults(fleet, op, old, ["xid79:3"])
    DemoAgents(fleet).tick()
    (ticket,) = tickets.list_tickets(fleet, op, tickets.OPEN).items
    with pytest.raises(InvalidInput, match="data disk"):
        replacement.swap(fleet, op, ticket.id, Swap(copy_data=True, path="/home"))
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token}
        r = CliRunner().invoke(app, ["ticket", "swap", ticket.id, "--copy-data", "--via",
                                     "bucket"], env=env)
        assert r.exit_code == 0, r.output
    worker.run_until_idle(timeout_s=60)
    after = instances.show_instance(fleet, me, iid)
    assert (after.status, after.stage) == ("ready", "ready")
    (spare,) = [n.name for n in after.nodes if n.status == "active"]
    assert spare != old
    copied = disk(fleet, spare) / "runs" / "llama-70b" / "step-900.safetensors"
    assert copied.read_bytes() == weights
    assert not disk(fleet, old).exists()  # erased once the copy was on the spare
    runs = [(r.kind, r.trigger, r.status, r.node) for r in backups.list_runs(fleet, me, iid).items]
    assert runs == [("restore", "swap_copy", "succeeded", spare),
                    ("backup", "swap_copy", "succeeded", old)]
    assert tickets.show_ticket(fleet, me, ticket.id).status == "mitigated"
    assert iam_keys(s3, tenant.tenant_id) == []


def test_a_swap_copies_the_data_disk_straight_from_agent_to_agent(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    """No object storage at all: the faulty server's agent serves its disk (encrypted),
    the spare's fetches it once accepted; the faulty one is erased after."""
    from gpulease.demo_agents import DemoAgents
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import replacement, tickets

    assert fleet.object_store() is None
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me, op = tenant.principal, operator.principal
    old = instances.show_instance(fleet, me, iid).nodes[0].name
    work = disk(fleet, old) / "runs" / "llama-70b"
    (work / "logs").mkdir(parents=True)
    weights = os.urandom((3 << 20) + 17)  # several frames, the last one short
    (work / "step-900.safetensors").write_bytes(weights)
    (work / "logs" / "empty.log").touch()
    (work / "latest").symlink_to("step-900.safetensors")  # not data: left out, and said
    os.chmod(work / "step-900.safetensors", 0o600)
    node_changes.inject_faults(fleet, op, old, ["xid79:3"])
    DemoAgents(fleet).tick()
    (ticket,) = tickets.list_tickets(fleet, op, tickets.OPEN).items
    with pytest.raises(InvalidInput, match="Accepted values: agents, bucket"):
        replacement.swap(fleet, op, ticket.id, Swap(copy_data=True, via="tape"))
    replacement.swap(fleet, op, ticket.id, Swap("GPU 3 fell off the bus", copy_data=True,
                                                path="/data/runs"))
    during = [(r.kind, r.status, r.node) for r in backups.list_runs(fleet, me, iid).items]
    assert during == [("send", "queued", old)]  # the faulty server starts serving at once
    worker.run_until_idle(timeout_s=90)
    after = instances.show_instance(fleet, me, iid)
    assert (after.status, after.stage) == ("ready", "ready")
    (spare,) = [n.name for n in after.nodes if n.status == "active"]
    copied = disk(fleet, spare) / "runs" / "llama-70b"
    assert (copied / "step-900.safetensors").read_bytes() == weights
    assert (copied / "step-900.safetensors").stat().st_mode & 0o777 == 0o600
    assert (copied / "logs" / "empty.log").read_bytes() == b""
    assert not disk(fleet, old).exists()  # erased once the copy was on the spare
    runs = {r.kind: r for r in backups.list_runs(fleet, me, iid).items}
    assert sorted(runs) == ["receive", "send"]
    assert (runs["receive"].status, runs["receive"].node) == ("succeeded", spare)
    assert (runs["send"].status, runs["send"].node) == ("succeeded", old)
    assert runs["receive"].files == 2 and runs["receive"].bytes_total == len(weights)
    assert runs["receive"].bytes_moved == len(weights)  # progress ends at the whole
    assert not (copied / "latest").exists()
    said = [st.message or "" for st in after.stages]
    assert any("1 left out (links, special or unreadable files): llama-70b/latest" in m
               for m in said)
    assert tickets.show_ticket(fleet, me, ticket.id).status == "mitigated"


def test_a_direct_copy_the_spare_cannot_fetch_is_said_and_the_swap_goes_on(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    from gpulease.db.tables import Event, Node
    from gpulease.demo_agents import DemoAgents
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import replacement, tickets

    fleet.settings.copy_wait_s = 5.0  # the source stops serving soon after (bounded)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me, op = tenant.principal, operator.principal
    old = instances.show_instance(fleet, me, iid).nodes[0].name
    (disk(fleet, old) / "ckpt").mkdir(parents=True)
    (disk(fleet, old) / "ckpt" / "w.pt").write_bytes(b"w" * 1000)
    with fleet.db.read() as s:  # whichever becomes the spare: its agent fails the fetch
        others = list(s.scalars(select(Node.name).where(Node.sku == "h100-80g-x8",
                                                         Node.region == "ningxia-1",
                                                         Node.name != old)))
    for name in others:
        assert fleet.drivers.fleet is not None
        fleet.drivers.fleet.inject_fault(name, "agent_transfer", "permanent", times=5)
    node_changes.inject_faults(fleet, op, old, ["xid79:3"])
    DemoAgents(fleet).tick()
    (ticket,) = tickets.list_tickets(fleet, op, tickets.OPEN).items
    replacement.swap(fleet, op, ticket.id, Swap(copy_data=True, path="/data/ckpt"))
    worker.run_until_idle(timeout_s=90)
    after = instances.show_instance(fleet, me, iid)
    assert (after.status, after.stage) == ("ready", "ready")  # the swap went on
    assert not disk(fleet, old).exists()  # and the faulty server was erased
    runs = {r.kind: r for r in backups.list_runs(fleet, me, iid).items}
    assert runs["receive"].status == runs["send"].status == "failed"
    assert "the spare could not fetch the copy" in (runs["send"].status_reason or "")
    with fleet.db.read() as s:  # said on the instance's history; the tenant told once
        said = list(s.scalars(select(Event.message).where(
            Event.instance_id == iid, Event.kind == "note", Event.to_value == "copy_failed")))
        kinds = list(s.scalars(select(LeaseNotice.kind).where(
            LeaseNotice.instance_id == iid, LeaseNotice.kind == "copy_failed")))
    assert kinds == ["copy_failed"]
    assert any("of /data/ckpt to the new server failed: simulated agent" in (m or "")
               for m in said), said


def test_an_order_restores_a_snapshot_onto_the_new_servers_data_disk(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    from gpulease.schemas import OrderRequest
    from gpulease.services.orders import ordering as orders

    worker = Worker(fleet)
    me = tenant.principal
    order = dict(sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key])
    with pytest.raises(Conflict, match="not set up"):
        orders.place_order(fleet, me, OrderRequest(**order, restore="anything"))
    with_storage(fleet, s3)
    old = deliver(fleet, tenant, worker, key)
    ckpt = disk(fleet, instances.show_instance(fleet, me, old).nodes[0].name) / "ckpt"
    (ckpt / "step-9").mkdir(parents=True)
    weights = os.urandom(1 << 20)
    (ckpt / "step-9" / "model.pt").write_bytes(weights)
    taken = backups.request(fleet, me, old, BackupRequest(path="/data/ckpt"))
    worker.run_until_idle()
    snapshot = backups.show_run(fleet, me, old, taken.id).snapshot_id
    assert snapshot
    actions.release_instance(fleet, me, old)
    worker.run_until_idle()

    with pytest.raises(NotFound, match="No snapshot"):
        orders.place_order(fleet, me, OrderRequest(**order, restore="20990101T000000Z-0"))
    with pytest.raises(InvalidInput, match="data disk"):
        orders.place_order(fleet, me, OrderRequest(
            kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key],
            restore=snapshot))
    with pytest.raises(InvalidInput, match="only you"):
        orders.place_order(fleet, me, OrderRequest(**order, restore=snapshot,
                                                   encrypted_data=True))
    with pytest.raises(InvalidInput, match="encrypt"):
        orders.place_order(fleet, me, OrderRequest(
            kind="container", offer="rtx4090-24g-container", gpus=1, ssh_keys=[key],
            encrypted_data=True))
    new = orders.place_order(fleet, me, OrderRequest(**order, restore=snapshot))[0].id
    worker.run_until_idle()
    assert instances.show_instance(fleet, me, new).status == "ready"
    run = backups.list_runs(fleet, me, new).items[0]
    assert (run.kind, run.trigger, run.status, run.snapshot_id, run.path) == (
        "restore", "order", "succeeded", snapshot, "/data/ckpt"), run.status_reason
    node = instances.show_instance(fleet, me, new).nodes[0].name
    assert (disk(fleet, node) / "ckpt" / "step-9" / "model.pt").read_bytes() == weights


def test_a_backup_to_the_tenants_own_s3_passes_the_egress_guard(
    fleet: Platform, tenant: TenantCtx, key: str, s3: EmbeddedS3
) -> None:
    from gpulease.schemas.fleet import BackupTarget

    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)  # the platform has no object storage here
    me = tenant.principal
    node = instances.show_instance(fleet, me, iid).nodes[0].name
    (disk(fleet, node) / "checkpoints").mkdir(parents=True)
    (disk(fleet, node) / "checkpoints" / "w.pt").write_bytes(b"w" * 5000)
    own_bucket = f"own-{tenant.tenant_id.lower()}"
    admin_s3(s3).create_bucket(Bucket=own_bucket)
    own = BackupTarget(endpoint=s3.url, bucket=own_bucket, access_key_id=s3.access_key,
                       secret_access_key=s3.secret_key, prefix="from-gpulease")
    for refused in (s3.url, "http://10.1.2.3:8333", "http://169.254.169.254"):  # none sent
        with pytest.raises(InvalidInput, match="public addresses"):
            backups.request(fleet, me, iid, BackupRequest(
                target=own.model_copy(update={"endpoint": refused})))
    fleet.settings.egress_allow = ["127.0.0.1/32"]  # this test's "public" S3 is loopback
    run = backups.request(fleet, me, iid, BackupRequest(target=own))
    assert run.target == f"{s3.url}/{own_bucket}" and s3.secret_key not in run.model_dump_json()
    drive(fleet, backup_runs.PIPELINE)
    done = backups.show_run(fleet, me, iid, run.id)
    assert done.status == "succeeded", done.status_reason
    listed = admin_s3(s3).list_objects_v2(Bucket=own_bucket, Prefix="from-gpulease/")
    assert any(o["Key"].endswith(f"{done.snapshot_id}.json") for o in listed["Contents"])
    assert admin_s3(s3).head_bucket(Bucket=own_bucket)  # their key is theirs: kept
    with fleet.db.read() as s:
        row = s.get(Backup, run.id)
        assert row is not None and row.key_id is None and row.payload_enc is None
        assert row.target_enc and s3.secret_key not in row.target_enc  # sealed

    # the guard is asked again when a run starts: an address no longer allowed fails it
    queued = backups.request(fleet, me, iid, BackupRequest(target=own))
    fleet.settings.egress_allow = []
    drive(fleet, backup_runs.PIPELINE)
    failed = backups.show_run(fleet, me, iid, queued.id)
    assert failed.status == "failed" and "public addresses" in (failed.status_reason or "")


def test_the_cli_names_your_own_s3_as_endpoint_bucket_and_prefix(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer

    from gpulease.cli.commands.backups import _target

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    assert _target("https://s3.example.com/ckpt/run-7/a") == {
        "endpoint": "https://s3.example.com", "bucket": "ckpt", "prefix": "run-7/a",
        "access_key_id": "AK", "secret_access_key": "SK"}
    assert _target(None) is None
    with pytest.raises(typer.Exit):
        _target("s3.example.com")  # no scheme, no bucket
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(typer.Exit):
        _target("https://s3.example.com/ckpt")


@pytest.mark.parametrize("via", ["agents", "bucket"])
def test_three_copy_swaps_in_a_row_each_carry_their_own_data(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str, s3: EmbeddedS3,
    via: str
) -> None:
    """Each swap's copy pairs its own two runs: the second and third swaps of one instance
    (the first swap's server, repaired, is a later spare) neither reuse an earlier swap's
    finished half nor erase the faulty server before the spare has the whole listing."""
    from gpulease.demo_agents import DemoAgents
    from gpulease.services.fleet import node_changes
    from gpulease.services.support import repairs, replacement, tickets

    with_storage(fleet, s3)
    worker = Worker(fleet)
    iid = deliver(fleet, tenant, worker, key)
    me, op = tenant.principal, operator.principal
    for round_ in range(1, 4):
        (serving,) = [n.name for n in instances.show_instance(fleet, me, iid).nodes
                      if n.status == "active"]
        work = disk(fleet, serving) / "runs"
        work.mkdir(parents=True, exist_ok=True)
        weights = os.urandom((1 << 20) + round_)
        (work / f"round-{round_}.bin").write_bytes(weights)
        node_changes.inject_faults(fleet, op, serving, ["xid79:3"])
        DemoAgents(fleet).tick()
        ticket = next(t for t in tickets.list_tickets(fleet, op, tickets.OPEN).items
                      if t.node == serving)
        replacement.swap(fleet, op, ticket.id, Swap(copy_data=True, path="/data/runs",
                                                    via=via))
        worker.run_until_idle(timeout_s=90)
        after = instances.show_instance(fleet, me, iid)
        assert (after.status, after.stage) == ("ready", "ready"), round_
        active = [n.name for n in after.nodes if n.status == "active"]
        assert len(active) == 1, (round_, after.nodes)
        spare = active[0]
        assert spare != serving
        copied = disk(fleet, spare) / "runs"
        assert sorted(p.name for p in copied.iterdir()) == [
            f"round-{r}.bin" for r in range(1, round_ + 1)], round_
        assert (copied / f"round-{round_}.bin").read_bytes() == weights
        assert not disk(fleet, serving).exists()  # erased once the copy was on the spare
        runs = backups.list_runs(fleet, me, iid).items
        assert len(runs) == 2 * round_ and all(r.status == "succeeded" for r in runs)
        repairs.finish(fleet, op, serving, f"GPU 3: round {round_}")
        worker.run_until_idle(timeout_s=60)  # erased, burned in, back in the pool

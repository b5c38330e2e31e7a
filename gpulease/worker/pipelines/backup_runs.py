"""The backup-runs pipeline: backups, restores and a swap's copies (services/storage/backups.py
queues them) driven a step at a time under a claim. A queued run is started: a key minted
for it (scoped to the tenant's bucket) or the tenant's own target checked again by the
egress guard, its payload sealed on the row, the work sent to the node's agent; a running
one is asked for its result. The agent's transfer runs outside any transaction while the
claim is held (the heartbeat extends it); every write goes through the claim, so a worker
that lost it writes nothing, and sends nothing (the fence). Failures are retried with
backoff (until the run's deadline, for a lapsed lease's), then the run fails and its
tenant is told."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import ColumnElement, and_, or_, select, update

from gpulease.db.claims import Claim, begin_step, due_now, guarded, release
from gpulease.db.ops_tables import Backup
from gpulease.db.tables import Instance, Node
from gpulease.domain.errors import InvalidInput
from gpulease.domain.phrases import phrase
from gpulease.domain.states import BACKUP, BackupStatus, InstanceStatus, NodeStatus
from gpulease.lifecycle.history import WORKER, note
from gpulease.lifecycle.writer import Move, transition
from gpulease.platform import Platform
from gpulease.ports.agent import (
    Agent,
    AgentError,
    BackupPayload,
    NodeRef,
    Pending,
    RestorePayload,
    TransferPayload,
)
from gpulease.ports.object_store import AccessKey
from gpulease.schemas.fleet import BackupTarget
from gpulease.services.agents.commands import progress_of
from gpulease.services.agents.node_agent import agent_for, node_ref
from gpulease.services.platform import egress
from gpulease.services.platform.outbox import Notice, post_notice
from gpulease.services.storage import buckets as storage
from gpulease.services.storage.backups import (
    COPY_KINDS,
    LEASE_END,
    LONGEST_PAUSE_S,
    MAX_ATTEMPTS,
    PAYLOADS,
    RETRY_AFTER_S,
    finish_failed,
    prefix_of,
)
from gpulease.services.storage.meter import counted
from gpulease.worker.pipelines.base import Pipeline
from gpulease.worker.pipelines.fence import Fence, Fenced, fenced_agent

log = logging.getLogger("gpulease.backups")
UNDER_WAY = (BackupStatus.QUEUED.value, BackupStatus.RUNNING.value)


def _due(now: datetime) -> list[ColumnElement[bool]]:
    return [Backup.status.in_(UNDER_WAY),
            or_(Backup.next_attempt_at.is_(None), Backup.next_attempt_at <= now)]


def _pending(now: datetime) -> ColumnElement[bool]:
    """Running (its agent at work), or queued and due."""
    return or_(Backup.status == BackupStatus.RUNNING.value,
               and_(Backup.status == BackupStatus.QUEUED.value,
                    or_(Backup.next_attempt_at.is_(None), Backup.next_attempt_at <= now)))


def step_run(p: Platform, held: Claim) -> None:
    """One step of one run: started, or asked after; a trouble of its own (the object store
    away) tries it again after RETRY_AFTER_S. The claim is let go at the end either way."""
    try:
        _drive(p, held)
    except Exception as exc:  # one run's trouble never stops the others
        log.warning("backup run %s: %s; next try in %.0f s", held.id, exc, RETRY_AFTER_S)
        with p.db.write() as s:
            run = guarded(s, Backup, held)
            if run is not None:
                run.next_attempt_at = p.clock.now() + timedelta(seconds=RETRY_AFTER_S)
    finally:
        with p.db.write() as s:
            run = guarded(s, Backup, held)
            if run is not None:
                release(run)


PIPELINE = Pipeline("backups", Backup, _due, _pending, step_run,  # the node's site
                    region=select(Node.region).where(Node.id == Backup.node_id)
                    .scalar_subquery())


def _drive(p: Platform, held: Claim) -> None:
    with p.db.read() as s:
        seen = s.get(Backup, held.id)
        if seen is None or seen.status not in UNDER_WAY:
            return
        queued, tenant = seen.status == BackupStatus.QUEUED.value, seen.tenant_id
        prefix = prefix_of(seen.source_instance_id or seen.instance_id)
        own = (BackupTarget.model_validate_json(p.box.open(seen.target_enc))
               if seen.target_enc else None)
        copy = seen.kind in COPY_KINDS
        node = s.get(Node, seen.node_id)
        # Its worker died mid-transfer with a stand-in agent, which works within the call:
        # nothing works on it any more. Started again, with a fresh key and the object
        # store's address as it is now (a restart may have moved it).
        restart = (held.taken_over and not queued and not copy and node is not None
                   and agent_for(p, node.agent_kind, node.bmc_driver).simulated)
    minted: Destination | None = None
    if copy:
        pass  # agent to agent: the payload was sealed when the run was queued
    elif (queued or restart) and own is not None:
        try:  # checked again at every start: a name may have changed its answer
            egress.check(p.settings, own.endpoint, "target.endpoint")
        except InvalidInput as exc:
            _refuse_target(p, held, str(exc))
            return
        minted = Destination(own.endpoint, own.bucket, AccessKey(
            own.access_key_id, own.secret_access_key), own.prefix)
    elif queued or restart:  # a run's key is minted before its transaction (slow I/O)
        minted = Destination(*storage.run_key(p, tenant, held.id, prefix))
    started = _start_or_check(p, held, minted, copy, restart)
    if minted is not None and not started and own is None:
        storage.end_run_key(p, tenant, held.id, minted.key.access_key_id)  # not used after all
    if started is None:
        return
    ref, payload, agent = started
    try:
        answer = fenced_agent(agent, Fence(p, held)).transfer(
            ref, payload, lambda moved, total: _progress(p, held, moved, total))
    except Fenced:
        return  # taken over while this worker was away: the new holder carries it
    except AgentError as exc:
        _record_failure(p, held, str(exc), exc.retryable)
        return
    if isinstance(answer, Pending):  # the real agent posts its progress to its command
        posted = progress_of(p, answer.reference)
        if posted is not None:
            _progress(p, held, *posted)
        return
    with p.db.write() as s:
        run = guarded(s, Backup, held)
        if run is None or run.status != BackupStatus.RUNNING.value:
            return
        now = p.clock.now()
        run.snapshot_id = answer.snapshot_id
        run.files, run.bytes_total = answer.files, answer.bytes_total
        run.bytes_moved, run.seconds = answer.bytes_moved, answer.seconds
        run.finished_at, run.next_attempt_at, run.payload_enc = now, None, None
        transition(s, p, run, BACKUP, "succeed", Move(now, actor=WORKER))
        what = (f"snapshot {answer.snapshot_id} of {run.path}: {answer.files} files, "
                f"{answer.bytes_total / 1e6:,.1f} MB ({answer.bytes_moved / 1e6:,.1f} MB "
                "sent)" if run.kind == "backup" else
                f"{run.path} served to the new server: {answer.files} files, "
                f"{answer.bytes_total / 1e6:,.1f} MB" if run.kind == "send" else
                f"{run.path} copied from the faulty server: {answer.files} files, "
                f"{answer.bytes_total / 1e6:,.1f} MB ({answer.bytes_moved / 1e6:,.1f} MB "
                "fetched), each verified" if run.kind == "receive" else
                f"snapshot {answer.snapshot_id} restored into {run.path}: {answer.files} "
                f"files, {answer.bytes_total / 1e6:,.1f} MB, verified")
        if answer.skipped:  # a link or a socket is not data to copy: said, not dropped
            what += (f"; {len(answer.skipped)} left out (links, special or unreadable "
                     f"files): {', '.join(answer.skipped[:5])}"
                     + (", …" if len(answer.skipped) > 5 else ""))
        note(s, now, run.instance_id, f"{run.kind}_done", what, actor=WORKER)
        if run.kind == "backup" and run.target is None:
            counted(s, run.tenant_id, answer.bytes_moved)
        if run.trigger in LEASE_END:
            post_notice(s, Notice(run.tenant_id, "backup_saved", phrase(
                "Your lease of {instance} has lapsed; before its disks are erased, {path} "
                "was saved to your bucket as snapshot {snapshot} ({files} files, {mb} MB). "
                "`gpulease order bare-metal … --restore {snapshot}` puts it on your next "
                "server.", instance=run.instance_id, path=run.path,
                snapshot=answer.snapshot_id, files=answer.files,
                mb=f"{answer.bytes_total / 1e6:,.1f}"), run.instance_id), now)
        due_now(s, Instance, run.instance_id, now)
        key_id = run.key_id
    _end_key(p, held.id, tenant, key_id)


class Destination(NamedTuple):
    """Where a run's bytes go: the tenant's bucket on the platform with a key minted for
    the run (prefix None: backups/<instance>/), or the tenant's own S3 and key."""

    endpoint: str
    bucket: str
    key: AccessKey
    own_prefix: str | None = None


def _start_or_check(p: Platform, held: Claim, minted: Destination | None, copy: bool = False,
                    restart: bool = False) -> tuple[NodeRef, TransferPayload, Agent] | None:
    """A queued run started with its minted key (its payload sealed on the row), a running
    one whose worker died started again (`restart`), or a running one's work to ask after;
    None when there is nothing to send (the run moved on, the claim was lost, or its
    server left the instance: failed)."""
    now = p.clock.now()
    stale: str | None = None  # a key of this run that is no longer used
    tenant = ""
    started: tuple[NodeRef, TransferPayload, Agent] | None = None
    with p.db.write() as s:
        run = guarded(s, Backup, held)
        if run is None or run.status not in UNDER_WAY:
            return None
        node = s.get(Node, run.node_id)
        inst = s.get(Instance, run.instance_id)
        if node is None or node.instance_id != run.instance_id or (
                node.status != NodeStatus.ACTIVE.value) or (
                inst is None or inst.status != InstanceStatus.READY.value):
            stale, tenant = run.key_id, run.tenant_id
            finish_failed(s, p, run, "the server left the instance (released, swapped or in "
                           "repair) before the run ended", now)
        else:
            if run.status == BackupStatus.QUEUED.value and copy:
                run.attempts += 1
                run.started_at = run.started_at or now
                transition(s, p, run, BACKUP, "start", Move(now, actor=WORKER))
            elif run.status == BackupStatus.QUEUED.value or restart:
                if minted is None:
                    return None  # queued again after this worker read it: next time
                stale, tenant = run.key_id, run.tenant_id  # the dead start's key, if any
                endpoint, bucket, key, own_prefix = minted
                fields = dict(endpoint=endpoint, bucket=bucket,
                              prefix=own_prefix if own_prefix is not None
                              else prefix_of(run.source_instance_id or run.instance_id),
                              access_key_id=key.access_key_id,
                              secret_access_key=key.secret_access_key, path=run.path,
                              max_mbps=run.max_mbps)
                sent = (RestorePayload(snapshot_id=run.snapshot_id or "", **fields)
                        if run.kind == "restore" else BackupPayload(**fields))
                run.key_id = None if own_prefix is not None else key.access_key_id  # theirs
                run.payload_enc = p.box.seal(sent.model_dump_json())  # the secret, sealed
                run.attempts += 1
                run.started_at = run.started_at or now
                if run.status == BackupStatus.QUEUED.value:
                    transition(s, p, run, BACKUP, "start", Move(now, actor=WORKER))
                else:
                    note(s, now, run.instance_id, f"{run.kind}_restarted", phrase(
                        "run {run} started again: the worker carrying it stopped",
                        run=run.id), actor=WORKER)
            elif minted is not None:
                return None  # another worker started it meanwhile
            assert run.payload_enc is not None
            sealed = p.box.open(run.payload_enc)
            payload = PAYLOADS[run.kind].model_validate_json(sealed)
            agent = agent_for(p, node.agent_kind, node.bmc_driver)
            # a stand-in agent answers within the call (a copy's, from its own thread), while
            # this worker holds the claim (its heartbeat keeps it): due again at once, so a
            # worker that dies mid-call leaves it only as long as its lock lasts
            poll_in = (max(p.settings.poll_interval_s, 0.2) if agent.simulated
                       else max(p.settings.poll_interval_s * 4, 1.0))
            run.next_attempt_at = now + timedelta(seconds=poll_in)
            begin_step(run, "transfer")
            # the attempt names the agent's work, so that a later poll finds what it filed
            started = (node_ref(p, node, stage=f"{run.id[-12:]}:{run.attempts}"), payload,
                       agent)
    _end_key(p, held.id, tenant, stale)
    return started


def _refuse_target(p: Platform, held: Claim, reason: str) -> None:
    """A tenant's own S3 that no longer passes the egress guard: the run fails."""
    with p.db.write() as s:
        run = guarded(s, Backup, held)
        if run is not None and run.status == BackupStatus.QUEUED.value:
            finish_failed(s, p, run, reason, p.clock.now())


def _progress(p: Platform, held: Claim, moved: int, total: int) -> None:
    """A running run's bytes moved so far, of the bytes it will move."""
    with p.db.write() as s:
        s.execute(update(Backup).where(Backup.id == held.id, Backup.lock_token == held.token,
                                       Backup.status == BackupStatus.RUNNING.value)
                  .values(bytes_moved=moved, bytes_total=total)
                  .execution_options(synchronize_session=False))


def _record_failure(p: Platform, held: Claim, reason: str, retryable: bool) -> None:
    now = p.clock.now()
    with p.db.write() as s:
        run = guarded(s, Backup, held)
        if run is None or run.status != BackupStatus.RUNNING.value:
            return
        key_id, tenant = run.key_id, run.tenant_id
        if run.kind not in COPY_KINDS:  # a copy keeps the key its two sides share
            run.payload_enc = None  # the next attempt mints its own key
        pause = timedelta(seconds=min(RETRY_AFTER_S * 2 ** (run.attempts - 1),
                                      LONGEST_PAUSE_S))
        if retryable and (run.attempts < MAX_ATTEMPTS or (
                run.retry_until is not None and now + pause < run.retry_until)):
            run.next_attempt_at = now + pause
            transition(s, p, run, BACKUP, "retry", Move(now, actor=WORKER,
                       reason=phrase("attempt {attempt} failed: {reason}",
                                     attempt=run.attempts, reason=reason[:900])))
        else:
            finish_failed(s, p, run, reason, now)
    _end_key(p, held.id, tenant, key_id)


def _end_key(p: Platform, run_id: str, tenant: str, key_id: str | None) -> None:
    """The run's key deleted (kept on the row, to try again, while the store does not
    answer)."""
    if key_id and storage.end_run_key(p, tenant, run_id, key_id):
        with p.db.write() as s:
            run = s.get(Backup, run_id, with_for_update=True)
            if run is not None and run.key_id == key_id:
                run.key_id = None

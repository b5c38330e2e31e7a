"""Stage timeouts: a node whose deploy or clean stage outlived its deadline fails (to
maintenance, its order moved to a spare or failed), unless a live worker holds it: only
unlocked or expired rows are claimed. It asks no hardware, so it runs every sweep whatever
the BMCs are doing (the BMC log sweep has a thread of its own). A worker that starts after
no worker was alive moves the deadlines on by the outage first (`pause_for_outage`); a
deadline set before the clock went back is brought back to one timeout from now."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select, update

from gpulease.db.claims import guarded, release
from gpulease.db.tables import Node
from gpulease.domain.states import NODE_IN_PIPELINE, NodeStage
from gpulease.lifecycle.history import SWEEP_TIMEOUTS
from gpulease.platform import Platform
from gpulease.worker.jobs.job import Job
from gpulease.worker.pipelines.base import claim_due, lock_instance_first
from gpulease.worker.pipelines.node_outcomes import Failure, fail_node

log = logging.getLogger("gpulease.worker")

# What a stage that timed out most likely means, said with the timeout
LIKELY = {
    NodeStage.WAIT_AGENT: "the installed system's agent never called in: it booted without "
                          "its config drive (no enrollment token), or cannot reach the "
                          "control plane at GPULEASE_GUEST_URL",
    NodeStage.WRITE_IMAGE: "the deploy ramdisk never reported: it did not boot from its "
                           "virtual media, got no address by DHCP, or cannot reach the "
                           "control plane at GPULEASE_GUEST_URL",
    NodeStage.BOOT_DISK: "the server did not power off after the ramdisk's report",
    NodeStage.CLEAN_WAIT_AGENT: "the cleaning ramdisk never called in or reported",
}


# A deadline further away than any stage may wait (the timeout, after a breaker's hold)
# by more than this was set by a clock that has since gone back
CLOCK_SLACK_S = 60.0


def bring_back_deadlines(p: Platform) -> int:
    """Deadlines set before the clock went back (an NTP step, a host's clock set by hand):
    one further away than any stage may wait is brought back to a stage timeout from now,
    so the node waits one timeout, not as long as the clock moved; how many."""
    now = p.clock.now()
    timeout = timedelta(seconds=p.settings.stage_timeout_s)
    far = now + timeout + timedelta(seconds=p.settings.breaker_retry_s + CLOCK_SLACK_S)
    in_pipeline = [st.value for st in NODE_IN_PIPELINE]
    with p.db.read() as s:  # most sweeps find none: no write turn for them
        if s.scalar(select(Node.id).where(Node.status.in_(in_pipeline),
                                          Node.stage_deadline > far).limit(1)) is None:
            return 0
    with p.db.write() as s:
        moved = s.execute(update(Node).where(Node.status.in_(in_pipeline),
                                             Node.stage_deadline > far)
                          .values(stage_deadline=now + timeout)
                          .execution_options(synchronize_session=False)
                          ).rowcount  # type: ignore[attr-defined]
    log.warning("%d node stage deadlines lay further ahead than any stage waits (the clock "
                "went back): each is now %.0f s away", moved, timeout.total_seconds())
    return int(moved)


def sweep_timeouts(p: Platform, owner: str) -> int:
    """Fail nodes whose stage outlived its deadline; returns how many."""
    bring_back_deadlines(p)
    now = p.clock.now()
    claims = claim_due(
        p, Node, owner, limit=50, due=False,
        extra=[Node.status.in_([st.value for st in NODE_IN_PIPELINE]),
               Node.stage_deadline < now],
    )
    for held in claims:
        with p.db.write() as s:
            lock_instance_first(s, s.scalar(select(Node.instance_id).where(Node.id == held.id)))
            node = guarded(s, Node, held)
            if node is None:
                continue
            release(node)
            timeout = p.settings.stage_timeout_s
            likely = LIKELY.get(NodeStage(node.stage)) if node.stage else None
            fail_node(s, p, node, Failure(
                f"stage {node.stage} timed out after {timeout:.0f} s"
                + (f": {likely}" if likely else ""), now, actor=SWEEP_TIMEOUTS, breaker=True))
    if claims:
        p.wake()
    return len(claims)


def pause_for_outage(p: Platform, outage_s: float) -> int:
    """No worker was alive for `outage_s`: the stages waiting meanwhile had nobody to move
    them, so their deadlines move on by as much (a worker outage pauses stage timeouts
    rather than failing every node in flight when the first worker comes back); how many
    nodes' deadlines moved."""
    if outage_s <= 0:
        return 0
    pause = timedelta(seconds=outage_s)
    with p.db.write() as s:  # (in Python: the column's type keeps instants in UTC)
        rows = s.execute(select(Node.id, Node.stage_deadline).where(
            Node.status.in_([st.value for st in NODE_IN_PIPELINE]),
            Node.stage_deadline.is_not(None))).all()
        for node_id, deadline in rows:
            if deadline is None:
                continue
            s.execute(update(Node).where(Node.id == node_id, Node.stage_deadline == deadline)
                      .values(stage_deadline=deadline + pause)
                      .execution_options(synchronize_session=False))
        moved = len(rows)
    if moved:
        log.warning("no worker was alive for %.0f s: %d node stage deadlines moved on by as "
                    "much", outage_s, moved)
    return moved


JOB = Job("timeouts", sweep_timeouts, "fail nodes whose stage outlived its deadline")

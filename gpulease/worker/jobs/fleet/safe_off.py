"""After a stage fails (a deploy or a clean that ends in maintenance), the server is left
safe: the virtual media ejected, the one-time boot override cleared and the power off, each
best effort, outside any transaction, and what happened recorded on the node's history.
A BMC that cannot be reached leaves it to the operator, saying so."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from gpulease.db.repositories import lock_node
from gpulease.db.tables import Node
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.lifecycle.history import Happened, record_event
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcError
from gpulease.services.platform.sites import EVERYWHERE, Scope
from gpulease.worker.jobs.job import Job, fan_out

SAFE_OFF = "sweep:safe-off"


def safe_off(p: Platform, limit: int = 20, scope: Scope = EVERYWHERE) -> int:
    """Make failed nodes (of `scope`'s regions) safe, GPULEASE_JOB_IO_CONCURRENCY BMCs at a
    time for at most GPULEASE_JOB_BUDGET_S; returns how many were tried."""
    here = scope.covers(Node.region)
    with p.db.read() as s:
        due = s.execute(select(Node.id, Node.name, Node.bmc_driver, Node.bmc_address,
                               Node.bmc_username, Node.bmc_password_enc)
                        .where(Node.safe_off_due.is_(True), *([] if here is None else [here]))
                        .limit(limit)).all()
    tried = fan_out([tuple(row) for row in due], lambda row: _leave_safe(p, row),
                    concurrency=p.settings.job_io_concurrency,
                    budget_s=p.settings.job_budget_s)
    return len(tried)


def _leave_safe(p: Platform, row: tuple[Any, ...]) -> bool:
    node_id, name, driver, address, user, sealed = row
    bmc = p.drivers.bmc_for(driver, BmcEndpoint(name, address, user, p.box.open(sealed)))
    done: list[Phrase] = []
    failed: list[Phrase] = []
    for what, short, act in ((phrase("media ejected"), "media", bmc.eject_media),
                             (phrase("boot override cleared"), "boot",
                              bmc.clear_boot_override),
                             (phrase("power off requested"), "power", bmc.power_off)):
        try:
            act()
            done.append(what)
        except BmcError as exc:
            failed.append(phrase("{what}: {error}", what=short, error=str(exc)))
    with p.db.write() as s:
        node = lock_node(s, node_id)
        if node is None:
            return False
        node.safe_off_due = False
        left = (phrase("left safe: {done}", done=listed(done, ", ")) if done
                else phrase("could not be left safe"))
        text = phrase("{left}; failed ({failed}): check the server at its BMC", left=left,
                      failed=listed(failed)) if failed else left
        record_event(s, p.clock.now(), Happened("node", node.id, "safe_off", message=text),
                     actor=SAFE_OFF)
    return True


JOB = Job("safe-off", lambda p, _owner: safe_off(p),
          "a node whose stage failed: media ejected, boot override cleared, power off (the "
          "worker's site only)", at_site=lambda p, scope: safe_off(p, scope=scope))

"""What the instances family does when an instance moves: a release hands it to the worker
at once, taking it from any worker mid-step."""

from __future__ import annotations

from gpulease.db.claims import take
from gpulease.db.tables import Instance
from gpulease.domain.states import INSTANCE
from gpulease.lifecycle.effects import Change, Effect
from gpulease.platform import Platform


def _hand_to_worker(c: Change[Platform]) -> None:
    inst: Instance = c.row
    inst.release_requested_at = c.now
    inst.next_attempt_at = c.now
    take(inst)  # a worker mid-step on this row must not overwrite the release


EFFECTS: tuple[Effect[Platform], ...] = (
    Effect(INSTANCE, "release", _hand_to_worker,
           "the worker takes it at once (a worker mid-step loses its lock)"),
)

"""What the instances family does when an instance moves: a release hands it to the worker
at once, taking it from any worker mid-step."""

from __future__ import annotations

from gpulease.db.claims import take
from gpulease.db.tables import Instance
from gpulease.domain.states import INSTANCE
from gpulease.lifecycle.effects import Change, Effect
from gpulease.ports.records import Moves


def _hand_to_worker(c: Change[Moves]) -> None:
    inst: Instance = c.row
    inst.release_requested_at = c.now
    inst.next_attempt_at = c.now
    take(inst)  # a worker mid-step on this row must not overwrite the release


EFFECTS: tuple[Effect[Moves], ...] = (
    Effect(INSTANCE, "release", _hand_to_worker,
           "the worker takes it at once (a worker mid-step loses its lock)"),
)

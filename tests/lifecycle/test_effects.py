"""The effects registry: each family's declarations, run in the declared order for the
event and source they name; a declaration of an event its machine does not have is
refused when the registry is made."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import pytest

from gpulease.compose import EFFECTS
from gpulease.domain.states import INSTANCE, LEASE, NODE, InstanceStatus
from gpulease.lifecycle.effects import Change, Effect, Effects
from gpulease.services.agents import effects as agent_effects
from gpulease.services.instances import effects as instance_effects
from gpulease.services.money import effects as money_effects


def change(machine: Any, event: str, source: StrEnum) -> Change[list[str]]:
    ran: list[str] = []
    return Change(s=None, p=ran, row=None, machine=machine, event=event,  # type: ignore[arg-type]
                  source=source, target=source, now=datetime.now(UTC), actor="test",
                  reason=None)


def test_effects_run_in_the_declared_order_for_their_event_and_source() -> None:
    def note(what: str) -> Any:
        return lambda c: c.p.append(what)

    effects = Effects.of(
        [Effect(INSTANCE, "release", note("first"), "one family")],
        [Effect(INSTANCE, "release", note("second"), "another family",
                only_from=frozenset({InstanceStatus.READY})),
         Effect(INSTANCE, "deliver", note("not this event"), "elsewhere")],
    )
    from_ready = change(INSTANCE, "release", InstanceStatus.READY)
    effects.run(from_ready)
    assert from_ready.p == ["first", "second"]
    from_pending = change(INSTANCE, "release", InstanceStatus.PENDING)
    effects.run(from_pending)
    assert from_pending.p == ["first"]  # `only_from` leaves the second out


def test_an_effect_of_an_undeclared_event_is_refused() -> None:
    with pytest.raises(ValueError, match="declares no event 'explode'"):
        Effects.of([Effect(NODE, "explode", lambda c: None, "nothing")])


def test_the_platform_runs_every_familys_effects_in_family_order() -> None:
    assert list(EFFECTS) == [*instance_effects.EFFECTS, *money_effects.EFFECTS,
                             *agent_effects.EFFECTS]
    release = [e.run.__module__ for e in EFFECTS if e.machine is INSTANCE
               and e.event == "release"]
    # the worker takes a released instance before the money moves; its nodes' agent
    # credentials end in the same transaction
    assert release == ["gpulease.services.instances.effects",
                       "gpulease.services.money.effects",
                       "gpulease.services.agents.effects"]
    assert any(e.machine is LEASE and e.event == "end" for e in EFFECTS)

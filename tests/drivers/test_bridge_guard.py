"""The container host's guard between tenants' bridges: each rule added only where missing,
the jumps first in FORWARD, a failure named with its command; and on this host (as root)
applied for real twice, the second time adding nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

import pytest

from gpulease.drivers import bridge_guard


class _Host:
    """A firewall that knows the rules it was given (-C finds them, -N makes the chain)."""

    def __init__(self, fail_on: str = "") -> None:
        self.present: set[tuple[str, ...]] = set()
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv: Sequence[str]) -> int:
        argv = list(argv)
        self.calls.append(argv)
        family, action, rest = argv[0], argv[4], argv[5:]
        if self.fail_on and self.fail_on in argv:
            return 1
        if action == "-L":
            return 0 if (family, rest[0]) in self.present else 1
        if action == "-C":
            return 0 if (family, *rest) in self.present else 1
        if action == "-I":
            rest = [rest[0], *rest[2:]]  # the position is not part of the rule
        self.present.add((family, *rest))
        return 0


def test_an_empty_host_gets_the_chain_its_rules_and_the_jumps_first() -> None:
    host = _Host()
    applied = bridge_guard.apply(host)
    assert [(a.family, a.added) for a in applied] == [("iptables", 9), ("ip6tables", 9)]
    made = [c for c in host.calls if c[4] in ("-N", "-A", "-I")]
    assert made[0] == ["iptables", "-w", "-t", "mangle", "-N", "GPULEASE-TENANTS"]
    inserts = [c for c in made if c[4] == "-I"]
    assert [c[5:8] for c in inserts] == [["FORWARD", "1", "-i"], ["FORWARD", "1", "-o"]] * 2
    appended = [c[5:] for c in made if c[4] == "-A" and c[0] == "iptables"]
    # bridged traffic and published ports go on before any drop
    assert appended[0][-1] == appended[1][-1] == "RETURN"
    assert all(rule[-1] == "DROP" for rule in appended[2:])
    assert ["GPULEASE-TENANTS", "-i", "gl+", "-o", "gl+", "-j", "DROP"] in appended


def test_applied_twice_the_second_adds_nothing() -> None:
    host = _Host()
    bridge_guard.apply(host)
    before = len(host.present)
    assert [a.added for a in bridge_guard.apply(host)] == [0, 0]
    assert len(host.present) == before


def test_a_rule_that_cannot_be_added_is_named() -> None:
    with pytest.raises(RuntimeError, match=r"ip.*tables -w -t mangle -A GPULEASE-TENANTS.*"
                                           r"physdev.*as root"):
        bridge_guard.apply(_Host(fail_on="--physdev-is-bridged"))


def test_a_family_whose_tool_is_not_installed_is_skipped() -> None:
    calls: list[list[str]] = []

    def absent(argv: Sequence[str]) -> int:
        calls.append(list(argv))
        return bridge_guard.NOT_INSTALLED

    assert [(a.family, a.added, a.missing_tool) for a in bridge_guard.apply(absent)] == [
        ("iptables", 0, True), ("ip6tables", 0, True)]
    assert [c[4] for c in calls] == ["-L", "-L"]  # asked once each, nothing added


def test_the_dry_run_lists_what_an_empty_host_gets() -> None:
    lines = bridge_guard.commands()
    host = _Host()
    bridge_guard.apply(host)
    ran = [" ".join(c) for c in host.calls if c[4] in ("-N", "-A", "-I")]
    assert lines == ran


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("iptables") is None,
                    reason="needs root and iptables (CI has both)")
def test_on_this_host_it_is_in_place_and_applied_again_adds_nothing() -> None:
    bridge_guard.apply()
    assert [a.added for a in bridge_guard.apply() if not a.missing_tool] == [0, 0]
    listing = subprocess.run(["iptables", "-w", "-t", "mangle", "-S", "FORWARD"],
                             capture_output=True, text=True, check=True).stdout
    assert "-A FORWARD -i gl+ -j GPULEASE-TENANTS" in listing


def test_a_chain_made_by_another_apply_meanwhile_is_no_failure() -> None:
    """Two applies at once on one host (CI's docker tests did): the chain the other just
    made is taken as is, not reported as a failure."""

    class _Raced(_Host):
        def __call__(self, argv: Sequence[str]) -> int:
            if list(argv)[4] == "-N":  # the other apply made it first
                self.present.add((argv[0], bridge_guard.CHAIN))
                return 1
            return super().__call__(argv)

    host = _Raced()
    assert [a.added for a in bridge_guard.apply(host)] == [9, 9]

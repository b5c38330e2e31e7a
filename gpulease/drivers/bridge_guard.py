"""The container host's guard between tenants' bridges: a few firewall rules that keep one
tenant's containers from routing to another's, whatever the Docker engine does meanwhile.

The engine keeps its bridge networks apart with rules in the filter table's FORWARD chain,
but Docker 20.10 (Debian 12's) deletes and inserts again the jumps to those rules whenever
any network is created or removed on the host: for that moment a container can open a
connection to another network's container (seen here: 3 of 3,000 probes got through
while 30 networks came and went). The guard sits in the mangle table, which the engine
does not touch and which a forwarded packet passes before the filter table: a packet
routed from a tenant's bridge (`gl-…`, named by the runtime) into another bridge, or into
a tenant's bridge from another, is dropped. What stays open: traffic on one bridge (a
tenant's own containers; bridged, not routed), a port published on the host (DNAT: open
to anyone anyway), and everything to and from outside the host.

`gpulease bridge-guard` applies it on a container host (as root; again after a reboot or
a firewall reload); applying twice changes nothing."""

from __future__ import annotations

import fcntl
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHAIN = "GPULEASE-TENANTS"
TABLE = "mangle"
TENANT_BRIDGES = "gl+"  # the runtime names every tenant bridge gl-<12 hex>
OTHER_BRIDGES = ("br-+", "docker0")  # the engine's other networks
FAMILIES = ("iptables", "ip6tables")
# One apply at a time on a host (two processes applying at once would both add the chain)
LOCK_DIRS = (Path("/run"), Path(tempfile.gettempdir()))

Run = Callable[[Sequence[str]], int]


def hooks() -> list[list[str]]:
    """The FORWARD chain's jumps into the guard: anything routed out of or into a tenant's
    bridge."""
    return [["FORWARD", "-i", TENANT_BRIDGES, "-j", CHAIN],
            ["FORWARD", "-o", TENANT_BRIDGES, "-j", CHAIN]]


def rules() -> list[list[str]]:
    """The guard's chain, in order."""
    drops = [["-i", TENANT_BRIDGES, "-o", TENANT_BRIDGES]]
    drops += [["-i", TENANT_BRIDGES, "-o", other] for other in OTHER_BRIDGES]
    drops += [["-i", other, "-o", TENANT_BRIDGES] for other in OTHER_BRIDGES]
    return [[CHAIN, "-m", "physdev", "--physdev-is-bridged", "-j", "RETURN"],
            [CHAIN, "-m", "conntrack", "--ctstate", "DNAT", "-j", "RETURN"],
            *[[CHAIN, *match, "-j", "DROP"] for match in drops]]


@dataclass(frozen=True)
class Applied:
    family: str
    added: int  # rules added this time (0: it was in place)
    missing_tool: bool = False


NOT_INSTALLED = 127  # a shell's answer for a command it cannot find


def _run(argv: Sequence[str]) -> int:
    try:
        return subprocess.run(list(argv), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, check=False).returncode
    except FileNotFoundError:
        return NOT_INSTALLED


def apply_family(family: str, run: Run = _run) -> Applied:
    """The chain, its rules and its jumps for one family, each added only where missing.
    A rule that cannot be added raises with the command that failed."""
    base = [family, "-w", "-t", TABLE]
    listed = run([*base, "-L", CHAIN, "-n"])
    if listed == NOT_INSTALLED:
        return Applied(family, 0, missing_tool=True)
    if listed != 0 and run([*base, "-N", CHAIN]) != 0 and run([*base, "-L", CHAIN, "-n"]) != 0:
        _must(run, [*base, "-N", CHAIN])  # not made by another apply meanwhile: say why
    added = 0
    for rule in rules():  # appended in order: the chain is the guard's alone
        if run([*base, "-C", *rule]) != 0:
            _must(run, [*base, "-A", *rule])
            added += 1
    for hook in hooks():  # first in FORWARD: before anything else in the mangle table
        if run([*base, "-C", *hook]) != 0:
            _must(run, [*base, "-I", hook[0], "1", *hook[1:]])
            added += 1
    return Applied(family, added)


@contextmanager
def _host_lock() -> Iterator[None]:
    """Held while the guard is applied: the host's other applies wait (flock)."""
    for folder in LOCK_DIRS:
        try:
            handle = (folder / "gpulease-bridge-guard.lock").open("a")
        except OSError:
            continue
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
            return
    yield  # nowhere to lock: applied as is (each step is checked first)


def apply(run: Run = _run) -> list[Applied]:
    with _host_lock():
        return [apply_family(family, run) for family in FAMILIES]


def _must(run: Run, argv: list[str]) -> None:
    if run(argv) != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: run it as root on the container "
                           "host; the kernel needs the physdev and conntrack matches "
                           "(xt_physdev, xt_conntrack)")


def commands() -> list[str]:
    """What `apply` runs on a host where nothing is in place yet, as shell lines."""
    lines = []
    for family in FAMILIES:
        base = f"{family} -w -t {TABLE}"
        lines.append(f"{base} -N {CHAIN}")
        lines += [f"{base} -A {' '.join(rule)}" for rule in rules()]
        lines += [f"{base} -I {hook[0]} 1 {' '.join(hook[1:])}" for hook in hooks()]
    return lines

"""A BMC's log read in as few requests as the BMC allows: where the service root offers
`$expand`, a log that only links its entries is read in one request a page; where it does
not, each entry is read on its own, and both reads say the same. A later read, given the
cursor of what was read, asks only for the entries after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.domain.fleet.bmc_events import cursor, new_entries
from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.redfish_hardware import expand_query
from gpulease.ports.bmc import BmcEndpoint, BmcLog
from gpulease.testing.redfish_trees.expanding import ExpandingTree, link_the_members
from gpulease.testing.redfish_trees.vendor_trees import write_dell_like, write_sel

SEL = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"
ENTRIES = [(f"2026-12-05T0{i // 10}:{i % 10}0:00+00:00", "Critical" if i % 7 == 0 else "OK",
            f"GPU {i % 8} event {i}", "PCI3001" if i % 7 == 0 else "SYS1001")
           for i in range(30)]


@pytest.fixture(params=[False, True], ids=["no-expand", "expand"])
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExpandingTree]:
    write_dell_like(tmp_path)
    write_sel(tmp_path, ENTRIES)
    assert link_the_members(tmp_path, SEL) == len(ENTRIES)
    served = ExpandingTree(tmp_path, expand=request.param)
    yield served
    served.stop()


def read(tree: ExpandingTree, seen: dict[str, str] | None = None) -> BmcLog:
    return RedfishDriver(timeout_s=5).bmc(BmcEndpoint(
        "xe9680", f"{tree.url}/redfish/v1/Systems/System.Embedded.1", "u", "p")
    ).event_log(seen)


def entry_reads(tree: ExpandingTree) -> int:
    return sum(n for path, n in tree.requests.items() if path.startswith(f"{SEL}/"))


def test_a_linked_log_is_read_whole_in_as_few_requests_as_the_bmc_allows(
        tree: ExpandingTree) -> None:
    log = read(tree)
    assert [e.message for e in log.entries] == [m for _, _, m, _ in ENTRIES]
    assert [e.id for e in log.entries] == [str(i + 1) for i in range(len(ENTRIES))]
    if tree.expand:
        assert entry_reads(tree) == 0 and "$expand=.($levels=1)" in tree.queries
        assert tree.requests[SEL] == 1  # the whole log, one request
    else:
        assert entry_reads(tree) == len(ENTRIES) and tree.queries == []


def test_a_later_read_asks_only_for_what_came_after_the_cursor(
        tree: ExpandingTree, tmp_path: Path) -> None:
    first = read(tree)
    seen = cursor(first.services, first.entries, {})
    read_before = entry_reads(tree)
    again = read(tree, seen)
    assert new_entries(again.entries, seen) == []
    # nothing new: the page, and (linked) the newest entry, found not after the cursor
    assert entry_reads(tree) - read_before == (0 if tree.expand else 1)
    more = [("2026-12-05T09:00:00+00:00", "Critical", f"GPU 3 later event {i}", "PCI3001")
            for i in range(3)]
    write_sel(tmp_path, ENTRIES + more)
    link_the_members(tmp_path, SEL)
    read_before = entry_reads(tree)
    later = read(tree, seen)
    assert [e.message for e in new_entries(later.entries, seen)] == [m for _, _, m, _ in more]
    assert entry_reads(tree) - read_before == (0 if tree.expand else len(more) + 1)


def test_the_expand_a_service_root_offers() -> None:
    def offered(**query: object) -> str | None:
        return expand_query({"ProtocolFeaturesSupported": {"ExpandQuery": query}})

    assert offered(NoLinks=True, Levels=True, MaxLevels=2) == "$expand=.($levels=1)"
    assert offered(ExpandAll=True) == "$expand=*"  # no levels: the BMC's own depth
    assert offered(ExpandAll=True, Levels=True, MaxLevels=0) == "$expand=*"
    assert offered(Links=True) is None and expand_query({}) is None


def test_a_cleared_log_numbered_from_one_again_is_read_as_new(
        tree: ExpandingTree, tmp_path: Path) -> None:
    first = read(tree)
    seen = cursor(first.services, first.entries, {})
    cleared = [("2026-12-06T01:00:00+00:00", "Critical", f"GPU 5 after the clear {i}",
                "PCI3001") for i in range(2)]
    write_sel(tmp_path, cleared)  # the operator cleared the SEL: ids 1 and 2 again
    link_the_members(tmp_path, SEL)
    later = read(tree, seen)
    assert [e.message for e in new_entries(later.entries, seen)] == [
        m for _, _, m, _ in cleared]

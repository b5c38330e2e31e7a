from __future__ import annotations

from gpulease.domain.catalog import load_catalog
from gpulease.domain.enrollment import Facts, compare

H100 = load_catalog().offer_by_id["h100-80g-x8@ningxia-1"]  # 2048 GB, 2 drives


def test_matching_facts_and_unreported_ones() -> None:
    result = compare(H100, Facts(memory_gib=2000.0, drive_count=2, drive_bytes=None,
                                 nic_count=None))
    assert result.matches and result.checked == ("memory", "drives")
    nothing = compare(H100, Facts(None, None, None, None))
    assert nothing.matches and nothing.unchecked == ("memory", "drives")
    assert "not reported by the BMC: memory, drives" in nothing.report()


def test_each_difference_is_named() -> None:
    result = compare(H100, Facts(memory_gib=1024.0, drive_count=1, drive_bytes=None,
                                 nic_count=1))
    assert not result.matches
    assert result.differences == ("memory 1024 GiB, offer says 2048 GB",
                                  "1 drives, offer says 2")
    checked = H100.model_copy(update={"nic_count": 10})
    assert compare(checked, Facts(2048.0, 2, None, 8)).differences == (
        "8 NICs, offer says 10",)
    assert compare(checked, Facts(2048.0, 2, None, None)).unchecked == ("NICs",)

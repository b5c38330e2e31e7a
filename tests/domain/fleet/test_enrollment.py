from __future__ import annotations

from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.enrollment import Facts, compare

H100 = load_catalog().offer_by_id["h100-80g-x8@ningxia-1"]  # 2048 GB, 2 drives


def test_matching_facts_and_unreported_ones() -> None:
    result = compare(H100, Facts(memory_gib=2000.0, drive_count=2, drive_bytes=None,
                                 nic_count=None))
    # the count is checked; sizes and virtual media the BMC did not report stay unchecked
    assert result.matches and result.checked == ("memory", "drive count")
    assert result.unchecked == ("drive sizes", "CPU", "virtual media")
    sized = compare(H100, Facts(2000.0, 2, (7_681_501_126_656,) * 2, None,
                                virtual_media=("CD", "USBStick")))
    assert sized.checked == ("memory", "drives", "virtual media")
    assert sized.unchecked == ("CPU",)
    nothing = compare(H100, Facts(None, None, None, None))
    assert nothing.matches and nothing.unchecked == ("memory", "drives", "CPU",
                                                     "virtual media")
    assert "not reported by the BMC: memory, drives, CPU, virtual media" in nothing.report()


def test_each_difference_is_named() -> None:
    result = compare(H100, Facts(memory_gib=1024.0, drive_count=1, drive_bytes=None,
                                 nic_count=1))
    assert not result.matches
    assert result.differences == ("memory 1024 GiB, offer says 2048 GB",
                                  "1 drives, offer says 2")
    checked = H100.model_copy(update={"nic_count": 10})
    assert compare(checked, Facts(2048.0, 2, None, 8)).differences == (
        "8 NICs, offer says 10",)
    assert compare(checked, Facts(2048.0, 2, None, None)).unchecked == (
        "drive sizes", "NICs", "CPU", "virtual media")
    small = compare(H100, Facts(2048.0, 2, (480_103_981_056,) * 2, None))
    assert small.differences == ("drives: offer says 2 × 7.6 TB NVMe, 0 found (the BMC lists "
                                 "2 × 0.48 TB)",)


def test_gpus_are_counted_and_their_vendor_checked_and_links_noted() -> None:
    from gpulease.domain.fleet.enrollment import GpuLink

    eight = Facts(2048.0, 2, None, None, gpu_count=8, gpu_vendors=("NVIDIA",) * 8)
    assert "GPUs" in compare(H100, eight, 8, "NVIDIA").checked
    assert compare(H100, Facts(2048.0, 2, None, None), 8, "NVIDIA").unchecked == (
        "GPUs", "drive sizes", "CPU", "virtual media")
    assert compare(H100, Facts(2048.0, 2, None, None, gpu_count=7), 8, "NVIDIA"
                   ).differences == ("7 GPUs, offer says 8",)
    ascend = Facts(2048.0, 2, None, None, gpu_count=8, gpu_vendors=("Huawei",) * 8)
    assert compare(H100, ascend, 8, "NVIDIA").differences == (
        "GPU vendor Huawei, offer says NVIDIA",)
    slow = Facts(2048.0, 2, None, None, gpu_count=8, gpu_links=(
        GpuLink("GPU3", 4, 8, 5, 16), GpuLink("GPU4", 5, 16, 5, 16)), hot=("PSU2 96 °C",))
    result = compare(H100, slow, 8, "NVIDIA")
    assert result.matches and len(result.notes) == 2
    assert result.notes[0].startswith("GPU3 links at Gen4 x8 of Gen5 x16")


def test_the_cpu_is_compared_with_the_offer() -> None:
    """64 threads were accepted for "2 × Intel, 48 logical cores each" (96 in all)."""
    base = Facts(2048.0, 2, None, None, virtual_media=("CD", "USBStick"))
    small = compare(H100, base.__class__(**{**base.__dict__, "cpu_sockets": 2,
                                            "cpu_threads": 64, "cpu_model": "Intel Xeon"}))
    assert small.differences == ("64 logical CPU cores, offer says 96",)
    right = compare(H100, base.__class__(**{**base.__dict__, "cpu_sockets": 2,
                                            "cpu_threads": 96, "cpu_cores": 48,
                                            "cpu_model": "Intel(R) Xeon(R) Platinum 8468"}))
    assert right.matches and "CPU" in right.checked
    no_threads = compare(H100, base.__class__(**{**base.__dict__, "cpu_sockets": 2,
                                                 "cpu_cores": 96}))
    assert no_threads.matches and "CPU threads" in no_threads.unchecked  # unknown: unchecked
    few_cores = compare(H100, base.__class__(**{**base.__dict__, "cpu_cores": 32}))
    assert few_cores.differences == ("32 CPU cores (at most 64 logical), offer says 96 "
                                     "logical",)
    one_socket = compare(H100, base.__class__(**{**base.__dict__, "cpu_sockets": 1,
                                                 "cpu_threads": 96}))
    assert one_socket.differences == ("1 CPU sockets, offer says 2",)
    amd = compare(H100, base.__class__(**{**base.__dict__, "cpu_threads": 96,
                                          "cpu_model": "AMD EPYC 9554"}))
    assert amd.differences == ("CPU AMD EPYC 9554, offer says 2 × Intel, 48 logical cores "
                               "each",)

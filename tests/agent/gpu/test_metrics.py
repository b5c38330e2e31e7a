"""/metrics parses with prometheus_client's parser and carries dcgm-exporter's names."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpulease.agent.gpu.metrics import Host, render
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.testing.servers import free_port

DCGM = {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_LINK_STATUS",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"}
# dcgm-exporter's label names, in its order
LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
          "DCGM_FI_DRIVER_VERSION"]


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_page_has_dcgm_names_labels_and_exact_wire_names() -> None:
    gpus = SimulatedGpus(8, faults=parse_faults(["xid79:2", "nvlink-down:4:11"]),
                         clock=VirtualClock())
    bus_ids = {g.index: g.pci_bus_id or "" for g in gpus.devices()}
    text = render(gpus.sample(), Host("gpu-node-7", "simulated", "570.1", "12.8", bus_ids), 0.002)
    fams = families(text)
    assert set(fams) >= DCGM
    temp = fams["DCGM_FI_DEV_GPU_TEMP"]
    samples = temp.samples  # type: ignore[attr-defined]
    assert len(samples) == 8
    assert samples[0].labels == {"gpu": "0", "UUID": gpus.uuid(0),
                                 "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
                                 "modelName": "NVIDIA H100 80GB HBM3",
                                 "Hostname": "gpu-node-7", "DCGM_FI_DRIVER_VERSION": "570.1"}
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert [pair.split("=")[0] for pair in first[first.index("{") + 1:first.index("}")]
            .split(",")] == LABELS
    xid = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}  # type: ignore[attr-defined]
    assert xid["2"] == 79 and xid["0"] == 0
    down = [(s.labels["gpu"], s.labels["link"]) for s in
            fams["DCGM_FI_DEV_NVLINK_LINK_STATUS"].samples if s.value == 0]  # type: ignore[attr-defined]
    assert down == [("4", "11")]
    # counters keep dcgm-exporter's names on the wire (no `_total` appended)
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    info = fams["gpulease_agent_info"].samples[0]  # type: ignore[attr-defined]
    assert info.labels["simulated"] == "true" and info.labels["backend"] == "simulated"


def test_unsupported_fields_are_left_out_not_zeroed() -> None:
    gpus = SimulatedGpus(1, model="rtx4090-24g", clock=VirtualClock())
    text = render(gpus.sample(), Host("h", "simulated"))
    assert "DCGM_FI_DEV_NVLINK_LINK_STATUS" not in text  # the 4090 has no NVLink


def test_label_values_are_escaped() -> None:
    gpus = SimulatedGpus(1, clock=VirtualClock())
    text = render(gpus.sample(), Host('odd"host\\name', "simulated"))
    fams = families(text)
    assert fams["DCGM_FI_DEV_GPU_TEMP"].samples[0].labels["Hostname"] == 'odd"host\\name'  # type: ignore[attr-defined]


def test_agent_process_serves_metrics_and_summary() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", "agent", "--backend", "simulated",
         "--listen", f"127.0.0.1:{port}", "--gpus", "4", "--interval", "0.2",
         "--fault", "xid79:3", "--hostname", "node-a"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "agent did not start"
                time.sleep(0.1)
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
        fams = families(resp.text)
        assert len(fams["DCGM_FI_DEV_SM_CLOCK"].samples) == 4  # type: ignore[attr-defined]
        time.sleep(0.5)
        summary = httpx.get(f"http://127.0.0.1:{port}/v1/summary", timeout=5).json()
        assert summary["simulated"] is True and summary["hostname"] == "node-a"
        assert [a["kind"] for a in summary["alerts"]] == ["gpu_fell_off_bus"]
        assert httpx.get(f"http://127.0.0.1:{port}/nope", timeout=5).status_code == 404
        bad = httpx.get(f"http://127.0.0.1:{port}/v1/summary?seconds=x", timeout=5)
        assert bad.status_code == 400
    finally:
        proc.terminate()
        proc.wait(10)


def test_agent_refuses_a_bad_listen_address() -> None:
    done = subprocess.run([sys.executable, "-m", "gpulease.cli.main", "agent", "--backend",
                           "simulated", "--listen", "nowhere"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "HOST:PORT" in done.stderr

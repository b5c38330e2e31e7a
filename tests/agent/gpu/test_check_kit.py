"""The GPU run kit (scripts/gpu-check.sh) in its dry run: the whole path a GPU machine
takes (suite, /metrics scraped over HTTP, figures against the published ceilings, one
JSON file), on simulated GPUs; and the kit needs nothing of the control plane, so it runs
on a GPU image that has only PyTorch and nvidia-ml-py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_dry_run_writes_the_figures_and_a_scrape(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((tmp_path / "gpu-check.json").read_text())
    assert result["dry_run"] and result["passed"] and result["catalog_gpu"] == "h200-141g"
    assert set(result["against_published"]) == {"matmul_bf16", "hbm_bandwidth",
                                                "host_to_device"}
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"} <= set(
        result["metrics"]["names"])
    assert "pci_bus_id=" in (tmp_path / "metrics.txt").read_text()
    assert "Acceptance PASSED (SIMULATED hardware)" in done.stdout


def test_the_kit_imports_nothing_of_the_control_plane() -> None:
    probe = ("import sys, gpulease.agent.gpu.check_kit\n"
             "heavy = [m for m in ('pydantic', 'sqlalchemy', 'fastapi', 'alembic', 'typer')"
             " if m in sys.modules]\n"
             "print(heavy)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

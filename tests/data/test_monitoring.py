"""The monitoring files shipped with the package, checked by Prometheus's own promtool
(Debian's `prometheus` package; .ci/run installs it): the GPU alert rules load and pass
their unit tests (tests/data/gpu-alerts.test.yml: each alert fires on the series
the agent serves, and only then); every query of the Grafana dashboard parses as PromQL
and reads only series the agent serves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpulease.agent.gpu.metrics import Host, render
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock, parse_faults
from gpulease.compose import make_platform

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "gpulease" / "data" / "monitoring"
RULES = MONITORING / "gpu-alerts.rules.yml"
DASHBOARD = MONITORING / "gpu-dashboard.json"
QUERY_RESULT = re.compile(r"query_result\((.*)\)")
SERIES = re.compile(r"\b((?:DCGM_FI|gpulease)_[A-Za-z0-9_]+)\b")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("GPULEASE_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is required here (Debian package prometheus)")
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return found


def agent_series() -> set[str]:
    gpus = SimulatedGpus(8, faults=parse_faults(["ecc-dbe:1"]), clock=VirtualClock())
    gpus.sample()
    page = render(gpus.sample(), Host("n1", "simulated", "570.1", "12.8"), 0.01)
    return {line.split("{")[0].split(" ")[0] for line in page.splitlines()
            if line and not line.startswith("#")}


def test_the_alert_rules_load_and_pass_their_unit_tests() -> None:
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", "gpu-alerts.test.yml"],
                            cwd=Path(__file__).parent, capture_output=True, text=True,
                            timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    names = {r["alert"] for r in rules}
    assert {"GpuFellOffBus", "GpuXidError", "GpuThermalSlowdown", "GpuDoubleBitEcc",
            "GpuNvlinkDown"} <= names  # XID, thermal, ECC, NVLink down, as promised
    used = {m for r in rules for m in SERIES.findall(r["expr"])}
    assert used <= agent_series()


def test_the_control_plane_rules_load_and_pass_their_unit_tests(tmp_path: Path) -> None:
    tool = promtool()
    rules_file = MONITORING / "control-plane-alerts.rules.yml"
    checked = subprocess.run([tool, "check", "rules", str(rules_file)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", "control-plane-alerts.test.yml"],
                            cwd=Path(__file__).parent, capture_output=True, text=True,
                            timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    rules = yaml.safe_load(rules_file.read_text())["groups"][0]["rules"]
    assert {"GpuleaseNoWorker", "GpuleaseStagePastTimeout", "GpuleaseDeliverySlaAtRisk",
            "GpuleaseNodeErrorStorm", "GpuleaseDeployBreakerOpen",
            "GpuleaseSiteWithoutWorker"} <= {r["alert"] for r in rules}
    from gpulease.services.platform import control_metrics
    from gpulease.testing.platforms import make_settings

    p = make_platform(make_settings(f"sqlite:///{tmp_path / 'm.db'}", tmp_path))
    p.db.migrate()
    served = {f.name for f in text_string_to_metric_families(
        control_metrics.render(p).decode())}
    p.db.dispose()
    used = {m for r in rules for m in re.findall(r"\bgpulease_[a-z0-9_]+", r["expr"])}
    assert used <= served, used - served


def test_every_dashboard_query_parses_and_reads_what_the_agent_serves(tmp_path: Path
                                                                       ) -> None:
    tool = promtool()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 12
    # Every panel and the pickers read the host from either label dcgm-exporter has used
    # (`Hostname`, then `hostname`): a node picked shows its GPUs under both releases.
    for e in exprs:
        assert e.count('Hostname=~"$node"') == e.count('hostname=~"$node"') > 0, e
    pickers = {v["name"]: v for v in dashboard["templating"]["list"]}
    inner = [QUERY_RESULT.fullmatch(pickers[name]["definition"]).group(1)  # type: ignore[union-attr]
             for name in ("node", "gpu")]
    assert "Hostname" in inner[0] and "hostname" in inner[0]
    assert re.search(pickers["node"]["regex"].strip("/"), 'x{hostname="n7"}').group(1) == "n7"  # type: ignore[union-attr]
    # Grafana's variables as Grafana would fill them, then each query as a recording rule
    concrete = [e.replace("$node", ".*").replace("$gpu", ".*")
                .replace("$__range", "1h") for e in [*exprs, *inner]]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:panel_{i}", "expr": e} for i, e in enumerate(concrete)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run([tool, "check", "rules", str(path)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    used = {m for e in exprs for m in SERIES.findall(e)}
    assert used <= agent_series(), used - agent_series()

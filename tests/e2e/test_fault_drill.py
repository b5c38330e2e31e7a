"""The README's fault drill, run as written against `gpulease up`, twice in a row on one
instance: a GPU falls off the bus on the rented server, the tenant's P1 ticket opens by
itself, the operator swaps in a spare with the data disk copied, the tenant's server is
the spare from then on, and the faulty one comes back to the pool once repaired; the
second round starts on the first round's spare."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpulease.testing.callers import ssh_key
from tests.e2e.up import Up, cli

pytestmark = pytest.mark.slow
OPERATOR = "operator.token"


def _until(what: str, probe: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"not within {timeout_s:.0f} s: {what}")


def _show(up: Up, instance_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(cli(up, "show", instance_id, "--json").stdout)
    return shown


def test_the_readme_fault_drill_runs_twice_on_one_instance(up: Up, tmp_path: Path) -> None:
    key_file = tmp_path / "id.pub"
    key_file.write_text(ssh_key() + "\n")
    ordered = cli(up, "order", "bare-metal", "--sku", "h100-80g-x8", "--region", "ningxia-1",
                  "--ssh-key", str(key_file), "--wait", "--json", "--yes")
    inst = json.loads(ordered.stdout)
    assert inst["status"] == "ready", ordered.stderr
    first = _drill(up, inst["id"])
    second = _drill(up, inst["id"])
    assert second[0] == first[1]  # the second round starts on the first round's spare
    assert second[1] != second[0]  # and moves to a spare of its own (the demo has several)
    assert _show(up, inst["id"])["status"] == "ready"


def _drill(up: Up, instance_id: str) -> tuple[str, str]:
    """One round of the README's drill; the faulty server and the spare it was swapped to."""
    faulty = _show(up, instance_id)["nodes"][0]["name"]
    fault = cli(up, "node", "fault", faulty, "xid79:3", token=OPERATOR)
    assert fault.returncode == 0, fault.stderr

    def p1_ticket() -> dict[str, Any] | None:
        listed = json.loads(cli(up, "tickets", "--open", "--json").stdout)["items"]
        return next((t for t in listed if t["instance_id"] == instance_id
                     and t["node"] == faulty and t["severity"] == "P1"), None)

    ticket = _until(f"the tenant's P1 ticket about {faulty}", p1_ticket, 60)
    swapped = cli(up, "ticket", "swap", ticket["id"], "--copy-data", token=OPERATOR)
    assert swapped.returncode == 0, swapped.stderr

    def on_the_spare() -> dict[str, Any] | None:
        shown = _show(up, instance_id)
        names = [n["name"] for n in shown["nodes"]]
        return shown if (shown["status"] == "ready" and shown["stage"] == "ready"
                         and names and faulty not in names) else None

    now = _until(f"the instance off {faulty}, on a spare", on_the_spare)
    said = " ".join(st["message"] or "" for st in now["stages"])
    assert "is copied to the new server first" in said, said[-600:]
    repaired = cli(up, "node", "repaired", faulty, "--parts", "GPU 3: SN1 -> SN2",
                   token=OPERATOR)
    assert repaired.returncode == 0, repaired.stderr

    def back_in_the_pool() -> bool:
        nodes = json.loads(cli(up, "nodes", "--json", token=OPERATOR).stdout)
        return any(n["name"] == faulty and n["status"] == "available" for n in nodes)

    _until(f"{faulty} back in the pool", back_in_the_pool)
    return faulty, now["nodes"][0]["name"]

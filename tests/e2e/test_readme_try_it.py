"""The README's "Try it", run as written against `gpulease up`: every command of the block,
in its order, at a terminal (a pseudo-terminal answers "y" where the CLI asks before it
spends), exits 0. What the README leaves to the reader is filled in the way a reader
would: `i-…` is the bare-metal server ordered at the top (the container for `image save`),
`ID` and the fault drill's nodes are a second rented server (an A100 in Sichuan: the
README's orders take Ningxia's H100s), `tk-…` the ticket the fault
opened, `SNAPSHOT` the backup just made, `…` in an order the order above it. Not run: the
lines that start the node agent in the background and read its port, the GPU kit, and the
webhook (it names example.com: nothing leaves this machine). A README line this test does
not know how to fill fails it, so the block and the test stay together."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpulease.testing.callers import ssh_key
from tests.e2e.up import Up, cli

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parents[2] / "README.md"
OPERATOR = ("GPULEASE_TOKEN=$(cat .gpulease/operator.token) ", "env $OP ")
NOT_RUN = ("export ", "alias ", "OP=", "curl ", "scripts/", "gpulease agent ",
           "gpulease webhook ")
BASE_ORDER = "--sku h100-80g-x8 --region ningxia-1 --ssh-key {key}"


def try_it() -> list[str]:
    """The block's commands, continuation lines joined, comments and blank lines left out."""
    block = README.read_text().split("## Try it", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = []
    for raw in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+#\s.*$", "", raw).strip()
        if line and not line.startswith("#"):
            lines.append(re.sub(r"\s+", " ", line))
    return lines


def at_terminal(up: Up, args: list[str], token: str, cwd: Path
                ) -> subprocess.CompletedProcess[str]:
    """The CLI with a terminal for its input, "y" typed ahead for a question."""
    main, other = pty.openpty()
    os.write(main, b"y\n")
    try:
        return subprocess.run([sys.executable, "-m", "gpulease.cli.main", *args],
                              env=up.env(token), stdin=other, capture_output=True,
                              text=True, timeout=300, cwd=cwd)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{args} still running after 300 s: {exc.stdout!r} {exc.stderr!r}")
    finally:
        os.close(other)
        os.close(main)


def instances(up: Up) -> dict[str, dict[str, Any]]:
    listed = json.loads(cli(up, "instances", "--all", "--json").stdout)
    return {i["id"]: i for i in listed}


class Reader:
    """What a reader of the README would put in place of its placeholders."""

    def __init__(self, up: Up, key: Path) -> None:
        self.up, self.key = up, key
        self.values: dict[str, str] = {}

    def fill(self, line: str) -> str:
        if "--restore SNAPSHOT" in line or "--encrypted-data" in line:
            line = line.replace("…", BASE_ORDER)
        elif "order container …" in line:
            line = line.replace("…", f"--gpus 2 --ssh-key {self.key}")
        line = line.replace("~/.ssh/id_ed25519.pub", str(self.key))
        line = line.replace("{key}", str(self.key))
        server = self.values["container"] if line.startswith("gpulease image save") else (
            self.values.get("bare_metal", ""))
        for placeholder, value in (("i-…", server), (" ID", " " + self.values.get("rented", "")),
                                   ("tk-…", self.values.get("ticket", "")),
                                   ("SNAPSHOT", self.values.get("snapshot", "")),
                                   ("<a rented node>", self.values.get("rented_node", "")),
                                   ("<the old node>", self.values.get("rented_node", "")),
                                   ("<tenant>", self.values.get("tenant", "")),
                                   ("GL2026-000001", self.values.get("invoice", ""))):
            line = line.replace(placeholder, value)
        assert "…" not in line and "<" not in line, f"the test cannot fill: {line}"
        return line


def test_every_command_of_the_readme_try_it_runs_as_written(up: Up, tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519.pub"
    key.write_text(ssh_key() + "\n")
    reader = Reader(up, key)
    # A second rented server, for the lines about "a rented server" (ID) and the fault drill.
    ordered = cli(up, "order", "bare-metal", "--sku", "a100-80g-x8", "--region", "sichuan-1",
                  "--ssh-key", str(key), "--wait", "--json", "--yes")  # Ningxia's H100s: the
    # README's own orders
    rented = json.loads(ordered.stdout)
    reader.values.update(rented=rented["id"], rented_node=rented["nodes"][0]["name"])
    tenants = json.loads(cli(up, "tenants", "--json", token="operator.token").stdout)
    reader.values["tenant"] = next(t["id"] for t in tenants if t["name"] != "Operators")
    ran = []
    for written in try_it():
        if written.startswith(NOT_RUN):
            continue
        prepare(reader, written)
        for command in written.split("; "):
            token = "demo-tenant.token"
            for prefix in OPERATOR:
                if command.startswith(prefix):
                    token, command = "operator.token", command.removeprefix(prefix)
            filled = reader.fill(command)
            before = instances(up) if filled.startswith("gpulease order") else {}
            args = filled.split()[1:]  # after `gpulease`
            done = at_terminal(up, [a.strip('"') for a in quoted(args)], token, tmp_path)
            assert done.returncode == 0, f"{filled}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
            ran.append(filled)
            if filled.startswith("gpulease order"):
                (made,) = [i for i in instances(up).values() if i["id"] not in before]
                reader.values.setdefault(made["kind"], made["id"])
            learn(reader, filled)
    assert len(ran) >= 55, ran  # the block has 58 commands to run today


def quoted(args: list[str]) -> list[str]:
    """Arguments with the README's double-quoted words put back together."""
    out: list[str] = []
    for arg in args:
        if out and out[-1].startswith('"') and not (len(out[-1]) > 1 and
                                                    out[-1].endswith('"')):
            out[-1] += " " + arg
        else:
            out.append(arg)
    return out


def prepare(reader: Reader, line: str) -> None:
    """What the README assumes has happened before a line: an invoice to show."""
    if "GL2026-000001" in line and "invoice" not in reader.values:
        run = cli(reader.up, "invoice-run", "2026-12", token="operator.token")
        assert run.returncode == 0, run.stderr
        listed = json.loads(cli(reader.up, "invoices", "--json").stdout)
        reader.values["invoice"] = listed[0]["number"] or listed[0]["id"]  # a draft: its id
    if "gpulease ticket repair" in line:  # the card path: another server's fault
        node = instances(reader.up)[reader.values["cluster"]]["nodes"][0]["name"]
        fault = cli(reader.up, "node", "fault", node, "xid79:3", token="operator.token")
        assert fault.returncode == 0, fault.stderr
        reader.values["ticket"] = p1_ticket(reader.up, node)


def p1_ticket(up: Up, node: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = json.loads(cli(up, "tickets", "--open", "--json").stdout)["items"]
        found = [t["id"] for t in listed if t["node"] == node and t["severity"] == "P1"]
        if found:
            return found[0]
        time.sleep(0.5)
    pytest.fail(f"no P1 ticket about {node}")


def learn(reader: Reader, line: str) -> None:
    """What a line made, that later lines name."""
    if line.startswith("gpulease backup "):
        runs = json.loads(cli(reader.up, "backups", reader.values["rented"], "--json").stdout)
        reader.values["snapshot"] = next(r["snapshot_id"] for r in runs if r["snapshot_id"])
    elif line.startswith("gpulease node fault"):
        reader.values["ticket"] = p1_ticket(reader.up, reader.values["rented_node"])

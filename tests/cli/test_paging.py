"""Operator lists say when they show part and page on: `gpulease nodes` at 2,000 nodes
said "2000 nodes" and showed 500 rows with no notice; `--json` held 500."""

from __future__ import annotations

import json

from sqlalchemy import func, select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer


def test_a_partial_list_says_so_and_all_pages_on(
    fleet: Platform, server: LiveServer, operator: TenantCtx
) -> None:
    with fleet.db.read() as s:
        total = s.scalar(select(func.count()).select_from(Node)) or 0
    assert total > 3
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": operator.token, "COLUMNS": "200"}
    runner = CliRunner()
    part = runner.invoke(app, ["nodes", "--limit", "2"], env=env)
    assert part.exit_code == 0, part.output
    assert f"showing 1-2 of {total}: --all shows every one, --offset 2" in part.output
    assert f"{total} nodes" in part.output
    every = runner.invoke(app, ["nodes", "--limit", "2", "--all", "--json"], env=env)
    assert every.exit_code == 0
    listed = json.loads(every.stdout)
    assert len(listed) == total and len({n["id"] for n in listed}) == total
    whole = runner.invoke(app, ["nodes"], env=env)
    assert "showing" not in whole.output  # all of them fit: nothing to say
    tickets = runner.invoke(app, ["tickets", "--all", "--json"], env=env)
    assert tickets.exit_code == 0 and json.loads(tickets.stdout)["items"] == []

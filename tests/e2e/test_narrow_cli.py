"""The CLI in a narrow terminal (#18): at 80 columns every row of `instances` and `nodes`
is one line no wider than the terminal, ids are never cut, the columns left out are named,
and `--wide` shows them all. SQLite (what is tested is the rendering)."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.cli.tables import Column, fitted
from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.schemas import OrderRequest
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import TenantCtx
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.strip()]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_instances_and_nodes_fit_80_columns_without_cutting_an_id(
    fleet: Platform, tenant: TenantCtx, operator: TenantCtx, key: str
) -> None:
    ids = [orders.place_order(fleet, tenant.principal, OrderRequest(
        sku=sku, region=region, ssh_keys=[key]))[0].id
        for sku, region in (("h100-80g-x8", "ningxia-1"), ("rtx4090-24g-x8", "sichuan-2"))]
    Worker(fleet).run_until_idle()
    with LiveServer(fleet) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "80"}
        narrow = CliRunner().invoke(app, ["instances"], env=env)
        wide = CliRunner().invoke(app, ["instances", "--wide"], env=env)
        ops = env | {"GPULEASE_TOKEN": operator.token}
        nodes = CliRunner().invoke(app, ["nodes"], env=ops)
    assert narrow.exit_code == 0, narrow.output
    assert all(len(ln) <= 80 for ln in lines(narrow.output)), narrow.output
    for iid in ids:
        assert iid in narrow.output  # whole, on its line
        assert sum(iid in ln for ln in lines(narrow.output)) == 1
    assert "left out: --wide shows them" in narrow.output
    assert "delivery" in wide.output and "left out" not in wide.output
    assert nodes.exit_code == 0, nodes.output
    with fleet.db.read() as s:
        total = s.scalar(select(func.count()).select_from(Node))
    rows = [ln for ln in lines(nodes.output) if "sim-" in ln]
    assert len(rows) == total  # one line per node
    assert all(len(ln) <= 80 for ln in lines(nodes.output)), nodes.output


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_cli_speaks_the_terminals_language(
    fleet: Platform, tenant: TenantCtx, key: str
) -> None:
    """`LANG=zh_CN.UTF-8`: headings, titles and status lines in Chinese (still 80 cells
    wide, ids whole); the data (ids, statuses a user types) as the API gave it; `C` or no
    language: English."""
    iid = orders.place_order(fleet, tenant.principal, OrderRequest(
        sku="h100-80g-x8", region="ningxia-1", ssh_keys=[key]))[0].id
    Worker(fleet).run_until_idle()
    quiet = {"LANGUAGE": "", "LC_ALL": "", "LC_MESSAGES": "", "GPULEASE_LANG": ""}
    with LiveServer(fleet) as server:
        base = quiet | {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token,
                        "COLUMNS": "80"}
        said = {lang: (CliRunner().invoke(app, ["instances"], env=base | {"LANG": lang}),
                       CliRunner().invoke(app, ["wallet"], env=base | {"LANG": lang}),
                       CliRunner().invoke(app, ["lease", iid], env=base | {"LANG": lang}))
                for lang in ("zh_CN.UTF-8", "C.UTF-8")}
    (zh_list, zh_wallet, zh_lease), (en_list, en_wallet, en_lease) = said.values()
    assert all(r.exit_code == 0 for r in (*said["zh_CN.UTF-8"], *said["C.UTF-8"]))
    assert "1 个实例" in zh_list.output and "状态" in zh_list.output
    assert iid in zh_list.output and "ready" in zh_list.output  # data as the API said it
    assert all(cell_len(ln) <= 80 for ln in lines(zh_list.output)), zh_list.output
    assert "1 instances" in en_list.output and "状态" not in en_list.output
    assert zh_wallet.output.startswith("余额 ¥") and "可用 ¥" in zh_wallet.output
    assert en_wallet.output.startswith("balance ¥") and "available ¥" in en_wallet.output
    assert "自动续费 关" in zh_lease.output or "自动续费 开" in zh_lease.output
    assert "基础周期 月" in zh_lease.output and "base term month" in en_lease.output
    # the agent's commands on a tenant's server too (a refusal before anything is touched)
    refused = CliRunner().invoke(app, ["agent", "erase", "/dev/no-such-disk"],
                                 env=quiet | {"LANG": "zh_CN.UTF-8"})
    assert refused.exit_code == 2 and "已拒绝：擦除 /dev/no-such-disk" in refused.output


def test_kept_columns_stay_and_the_rest_fill_in_order() -> None:
    cols = (Column("id", keep=True), Column("a"), Column("b"), Column("c", keep=True))
    rows = [("i-0123456789ab", "x" * 10, "y" * 40, "ok")]
    t = fitted(cols, rows, width=40)
    assert [c.header for c in t.columns] == ["id", "a", "c"]  # b does not fit; c is kept
    assert t.caption == "b left out: --wide shows them"
    assert [c.header for c in fitted(cols, rows, width=40, wide=True).columns] == [
        "id", "a", "b", "c"]

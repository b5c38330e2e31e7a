"""The CLI asks before it spends: an order, a renewal and an add-on raise say the amount and
ask at a terminal (no: nothing spent); with no terminal they need --yes (exit 2, nothing
spent); after the spend they print what was taken. The amounts come from the platform's own
review, renewal quote and add-on charge, the ones the spend then takes. SQLite and
PostgreSQL."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulease.cli import spend
from gpulease.cli.main import app
from gpulease.platform import Platform
from gpulease.services.instances import views as instances
from gpulease.services.money import wallet
from gpulease.testing.callers import TenantCtx
from gpulease.testing.clock import MovableClock
from gpulease.testing.factories import deliver
from gpulease.testing.servers import LiveServer
from gpulease.worker.runner import Worker


def _cli(server: LiveServer, tenant: TenantCtx, *args: str, answer: str = ""
         ) -> tuple[int, str]:
    done = CliRunner().invoke(app, list(args), input=answer, env={
        "GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "200"})
    return done.exit_code, done.output


def test_an_order_a_renewal_and_an_add_on_ask_first(
    fleet: Platform, clock: MovableClock, server: LiveServer, tenant: TenantCtx,
    worker: Worker, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    key_file = tmp_path / "id.pub"
    key_file.write_text(key + "\n")
    order = ("order", "container", "--gpus", "2", "--ssh-key", str(key_file))
    balance = wallet.show_wallet(fleet, tenant.principal).balance

    code, said = _cli(server, tenant, *order)  # no terminal, no --yes
    assert code == 2 and "¥3.92 from your wallet" in said and "add --yes" in said
    monkeypatch.setattr(spend, "at_terminal", lambda: True)
    code, said = _cli(server, tenant, *order, answer="n\n")
    assert code == 1 and "Go ahead? [y/N]" in said and "Nothing was spent." in said
    assert instances.list_instances(fleet, tenant.principal).total == 0
    assert wallet.show_wallet(fleet, tenant.principal).balance == balance

    bm = deliver(fleet, tenant, worker, key)  # an H100 month
    code, said = _cli(server, tenant, "renew", bm, "--periods", "2", answer="y\n")
    assert code == 0, said
    assert "¥168,960.00 from your wallet" in said and "charged ¥168,960.00" in said
    monkeypatch.setattr(spend, "at_terminal", lambda: False)
    code, said = _cli(server, tenant, "addon", bm, "public-bandwidth", "100")
    assert code == 2 and "for the paid time left charges" in said
    before = wallet.show_wallet(fleet, tenant.principal).balance
    code, said = _cli(server, tenant, "addon", bm, "public-bandwidth", "100", "--yes")
    assert code == 0, said
    taken = before - wallet.show_wallet(fleet, tenant.principal).balance
    assert taken > Decimal(0) and f"charged ¥{taken:,.2f}" in said  # what it said it took

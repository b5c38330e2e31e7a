"""The money side: wallet and ledger, leases and renewals, webhooks, top-ups and credit
limits, metered usage, invoices and credit notes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import typer
from rich.table import Table

from gpulease.cli.common import (
    JsonOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    err,
    out,
    print_json,
)
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.domain.leases import local_text

app = typer.Typer()


@app.command()
def wallet(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """The prepaid balance, credit limit and what open orders hold."""
    suffix = f"?tenant={tenant}" if tenant else ""
    w = api(lambda: connect(url, token).get_json(f"/wallet{suffix}"))
    if as_json:
        return print_json(w)
    out.print(f"balance ¥{Decimal(w['balance']):,.2f}  credit limit "
              f"¥{Decimal(w['credit_limit']):,.2f}  held by undelivered orders "
              f"¥{Decimal(w['held']):,.2f}  available ¥{Decimal(w['available']):,.2f}",
              highlight=False)
    if w.get("suspended_reason"):
        out.print(f"[red]suspended[/red]: {w['suspended_reason']}; new orders are refused "
                  "until you top up")
    elif w.get("overdrawn_since"):
        out.print(f"[yellow]overdrawn[/yellow] since {w['overdrawn_since'][:16]} UTC: top up "
                  "before the grace ends")


@app.command()
def ledger(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
           limit: Annotated[int, typer.Option()] = 50,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
           wide: WideOpt = False) -> None:
    """Every movement of the wallet, newest first."""
    query = f"?limit={limit}" + (f"&tenant={tenant}" if tenant else "")
    page = api(lambda: connect(url, token).get_json(f"/wallet/ledger{query}"))
    if as_json:
        return print_json(page["items"])
    show_table(fitted(
        (Column("at", keep=True), Column("kind", keep=True),
         Column("amount ¥", keep=True, justify="right"),
         Column("balance ¥", keep=True, justify="right"), Column("instance"),
         Column("reference")),
        [(e["at"][:16].replace("T", " "), e["kind"], f"{Decimal(e['amount']):,.2f}",
          f"{Decimal(e['balance_after']):,.2f}", e["instance_id"] or "",
          e["reference"] or "") for e in page["items"]], wide=wide), wide)


def _show_lease(data: dict[str, Any]) -> None:
    zone = ZoneInfo(data.get("time_zone") or "UTC")

    def at(value: str) -> str:
        return local_text(datetime.fromisoformat(value), zone)

    grace = f", grace until {at(data['grace_until'])}" if data["grace_until"] else ""
    out.print(f"{data['instance_id']}: {data['status']}, {data['periods']} period(s), base "
              f"term {data['term']} at ¥{Decimal(data['unit_price']):,.2f}, from "
              f"{at(data['starts_at'])} to {at(data['ends_at'])}{grace}; auto-renew "
              f"{'on' if data['auto_renew'] else 'off'}", highlight=False)
    if len(data.get("schedule") or []) > 1:
        table = Table("#", "term", "from", "to", "price ¥", "")
        for p in data["schedule"]:
            table.add_row(str(p["seq"]), p["term"], at(p["starts_at"]), at(p["ends_at"]),
                          f"{Decimal(p['price']):,.2f}", "refunded" if p["refunded"] else "")
        out.print(table)


@app.command("lease")
def lease_show(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
               as_json: JsonOpt = False) -> None:
    """A bare-metal instance's term, its end and grace, and auto-renew."""
    data = api(lambda: connect(url, token).get_json(f"/instances/{instance_id}/lease"))
    return print_json(data) if as_json else _show_lease(data)


@app.command()
def renew(instance_id: str,
          periods: Annotated[int, typer.Option(help="periods to add")] = 1,
          term: Annotated[str | None, typer.Option(help="switch to day or month")] = None,
          url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Extend a lease (charged from the wallet now); during grace it cancels the erase."""
    body: dict[str, Any] = {"periods": periods}
    if term:
        body["term"] = term
    data = api(lambda: connect(url, token).post_json(f"/instances/{instance_id}/renew", body))
    return print_json(data) if as_json else _show_lease(data)


@app.command()
def addons(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
           as_json: JsonOpt = False) -> None:
    """A lease's add-ons, past, present and waiting for the end of the paid periods."""
    rows = api(lambda: connect(url, token).get_json(f"/instances/{instance_id}/addons"))
    if as_json:
        return print_json(rows)
    table = Table("add-on", "quantity", "unit", "unit price ¥", "since", "until")
    for r in rows:
        table.add_row(r["name"], r["quantity"], r["unit"], r["unit_price"], r["since"][:16],
                      (r["until"] or "")[:16])
    out.print(table)


@app.command()
def addon(instance_id: str, addon_id: Annotated[str, typer.Argument(
              help="public-bandwidth, extra-storage, support-standard, support-premium")],
          quantity: Annotated[str, typer.Argument(help="the new quantity; 0 removes it")],
          url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Take, raise, lower or remove an add-on on a running lease: more is charged now for
    the paid time left; less takes effect when the paid periods end."""
    api(lambda: connect(url, token).put_json(f"/instances/{instance_id}/addons/{addon_id}",
                                             {"quantity": quantity}))
    addons(instance_id, url, token)


@app.command("auto-renew")
def auto_renew(instance_id: str, state: Annotated[str, typer.Argument(help="on or off")],
               url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Renew automatically at expiry when the balance allows (else remind, then grace)."""
    if state not in ("on", "off"):
        err.print("[red]error[/red]: say on or off")
        raise typer.Exit(2)
    data = api(lambda: connect(url, token).put_json(
        f"/instances/{instance_id}/auto-renew", {"auto_renew": state == "on"}))
    _show_lease(data)


@app.command()
def webhook(url: Annotated[str, typer.Argument(help="https URL, or 'remove'")],
            api_url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Tenant admin: receive lease reminders as signed webhooks (the secret is shown once)."""
    client = connect(api_url, token)
    if url == "remove":
        api(lambda: client._call_empty("DELETE", "/api/v1/webhook"))
        out.print("webhook removed")
        return
    data = api(lambda: client.put_json("/webhook", {"url": url}))
    out.print(f"webhook {data['url']}\nsigning secret (shown once): {data['secret']}",
              highlight=False)


@app.command("top-up")
def top_up(tenant_id: str, amount: str,
           reference: Annotated[str, typer.Option(help="the payment's reference")],
           url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: record money a tenant paid in."""
    w = api(lambda: connect(url, token).post_json(
        f"/tenants/{tenant_id}/top-ups", {"amount": amount, "reference": reference}))
    out.print(f"{tenant_id}: balance ¥{Decimal(w['balance']):,.2f}", highlight=False)


@app.command()
def payout(tenant_id: str, amount: str,
           reference: Annotated[str, typer.Option(help="the refund's bank reference")],
           url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: record wallet balance paid back to the tenant's original payment."""
    w = api(lambda: connect(url, token).post_json(
        f"/tenants/{tenant_id}/payouts", {"amount": amount, "reference": reference}))
    out.print(f"{tenant_id}: ¥{Decimal(amount):,.2f} paid out; balance "
              f"¥{Decimal(w['balance']):,.2f}", highlight=False)


@app.command("billing-profile")
def billing_profile(
    title: Annotated[str | None, typer.Option(help="发票抬头: the buyer's name")] = None,
    tax_id: Annotated[str, typer.Option(help="纳税人识别号")] = "",
    address: Annotated[str, typer.Option(help="registered address")] = "",
    phone: Annotated[str, typer.Option()] = "",
    bank: Annotated[str, typer.Option(help="开户行")] = "",
    bank_account: Annotated[str, typer.Option(help="账号")] = "",
    invoice_type: Annotated[str, typer.Option(
        help="normal (普票) or special (专票: needs every field)")] = "normal",
    email: Annotated[str, typer.Option(help="where the fapiao is sent")] = "",
    tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """The buyer printed on your invoices; with --title, set it (tenant admin)."""
    suffix = f"?tenant={tenant}" if tenant else ""
    client = connect(url, token)
    if title is None:
        b = api(lambda: client.get_json(f"/billing-profile{suffix}"))
    else:
        b = api(lambda: client.put_json(f"/billing-profile{suffix}", {
            "title": title, "tax_id": tax_id, "address": address, "phone": phone,
            "bank": bank, "bank_account": bank_account, "invoice_type": invoice_type,
            "email": email}))
    if as_json:
        return print_json(b)
    lines = [f"{b['title']} · {b['tax_id'] or 'no taxpayer id'} · "
             f"{'专票 special' if b['invoice_type'] == 'special' else '普票 normal'}",
             f"{b['address']} {b['phone']}".strip(), f"{b['bank']} {b['bank_account']}".strip(),
             f"fapiao to {b['email']}" if b["email"] else ""]
    out.print("\n".join(line for line in lines if line), highlight=False)


@app.command("invoices-export")
def invoices_export(period: Annotated[str, typer.Argument(help="YYYY-MM")],
                    csv: Annotated[Path | None, typer.Option(
                        help="write the CSV here (one row per line, buyer on each)")] = None,
                    url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: a month's final invoices and credit notes for the fapiao system (JSON to
    stdout, or --csv FILE)."""
    client = connect(url, token)
    if csv is not None:
        csv.write_bytes(api(lambda: client.get_bytes(
            f"/invoices/export?period={period}&format=csv")))
        out.print(f"wrote {csv}", highlight=False)
        return None
    return print_json(api(lambda: client.get_json(f"/invoices/export?period={period}")))


@app.command()
def revenue(start: Annotated[str, typer.Argument(help="first month, YYYY-MM")],
            end: Annotated[str, typer.Argument(help="last month, YYYY-MM")],
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: invoiced net earned month by month over each line's service period."""
    r = api(lambda: connect(url, token).get_json(f"/revenue?start={start}&end={end}"))
    if as_json:
        return print_json(r)
    table = Table("month", "earned net ¥")
    for m in r["months"]:
        table.add_row(m["period"], f"{Decimal(m['net']):,.2f}")
    table.add_row("total", f"{Decimal(r['total']):,.2f}")
    out.print(table)


@app.command("dunning")
def dunning_cmd(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: tenants overdrawn, suspended or with unpaid invoices."""
    rows = api(lambda: connect(url, token).get_json("/dunning"))
    if as_json:
        return print_json(rows)
    table = Table("tenant", "balance ¥", "owed on invoices ¥", "unpaid", "oldest (days)",
                  "overdrawn since", "suspended", "running")
    for r in rows:
        table.add_row(f"{r['tenant_name']} ({r['tenant_id']})", f"{Decimal(r['balance']):,.2f}",
                      f"{Decimal(r['owed_on_invoices']):,.2f}",
                      ", ".join(r["unpaid_invoices"]), str(r["oldest_unpaid_days"] or ""),
                      (r["overdrawn_since"] or "")[:16], r["suspended_reason"] or "",
                      ", ".join(r["running"]))
    out.print(table)


@app.command("credit-limit")
def credit_limit(tenant_id: str, amount: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: let a tenant's orders hold up to this much beyond its balance."""
    w = api(lambda: connect(url, token).put_json(
        f"/tenants/{tenant_id}/credit-limit", {"credit_limit": amount}))
    out.print(f"{tenant_id}: credit limit ¥{Decimal(w['credit_limit']):,.2f}", highlight=False)


@app.command()
def invoices(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
             period: Annotated[str | None, typer.Option(help="YYYY-MM")] = None,
             status: Annotated[str | None, typer.Option(help="draft or final")] = None,
             url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
             wide: WideOpt = False) -> None:
    """Monthly invoices and credit notes, newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("tenant", tenant), ("period", period),
                                               ("status", status)) if v)
    page = api(lambda: connect(url, token).get_json(f"/invoices?{query}"))
    if as_json:
        return print_json(page["items"])
    show_table(fitted(
        (Column("number", keep=True), Column("period", keep=True),
         Column("total ¥", keep=True, justify="right"), Column("status", keep=True),
         Column("id"), Column("kind"), Column("credited ¥", justify="right"),
         Column("net ¥", justify="right"), Column("VAT ¥", justify="right"),
         Column("tenant")),
        [(i["number"] or "(draft)", i["period"], f"{Decimal(i['total']):,.2f}", i["status"],
          i["id"], i["kind"], f"{Decimal(i['credited']):,.2f}", f"{Decimal(i['net']):,.2f}",
          f"{Decimal(i['vat']):,.2f}", i["tenant_name"]) for i in page["items"]],
        wide=wide), wide)


@app.command()
def invoice(invoice_id: Annotated[str, typer.Argument(help="id or number (GL2026-000001)")],
            pdf: Annotated[Path | None, typer.Option(help="write the PDF here")] = None,
            csv: Annotated[Path | None, typer.Option(help="write the CSV here")] = None,
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """One invoice with its lines; --pdf / --csv save the document."""
    client = connect(url, token)
    for path, fmt in ((pdf, "pdf"), (csv, "csv")):
        if path is not None:
            path.write_bytes(api(lambda f=fmt: client.get_bytes(  # type: ignore[misc]
                f"/invoices/{invoice_id}?format={f}")))
            out.print(f"wrote {path}", highlight=False)
    if pdf is not None or csv is not None:
        return None
    inv = api(lambda: client.get_json(f"/invoices/{invoice_id}"))
    if as_json:
        return print_json(inv)
    kind = "Credit note" if inv["kind"] == "credit_note" else "Invoice"
    paid = {"paid": " · paid", "unpaid": f" · unpaid, ¥{Decimal(inv['amount_due'] or 0):,.2f} "
            "due"}.get(inv.get("payment_status") or "", "")
    out.print(f"{kind} {inv['number'] or '(draft)'} · {inv['tenant_name']} · {inv['period']} · "
              f"{inv['status']}{paid}" + (f" · corrects {inv['corrects']}: {inv['reason']}"
                                          if inv["corrects"] else ""), highlight=False)
    if inv.get("buyer"):
        b = inv["buyer"]
        out.print(f"buyer: {b['title']}" + (f" ({b['tax_id']})" if b["tax_id"] else ""),
                  highlight=False)
    table = Table("#", "description", "qty", "unit price ¥", "net ¥", "VAT ¥", "amount ¥")
    for ln in inv["lines"]:
        qty = f"{ln['quantity']} {ln['unit'] or ''}" if ln["quantity"] is not None else ""
        table.add_row(str(ln["seq"]), ln["description"], qty, ln["unit_price"] or "",
                      f"{Decimal(ln['net']):,.2f}", f"{Decimal(ln['vat']):,.2f}",
                      f"{Decimal(ln['gross']):,.2f}")
    table.add_row("", f"total (VAT {(Decimal(inv['vat_rate']) * 100).normalize():f}%)", "", "",
                  f"{Decimal(inv['net']):,.2f}", f"{Decimal(inv['vat']):,.2f}",
                  f"{Decimal(inv['total']):,.2f}")
    out.print(table)


@app.command("invoice-run")
def invoice_run(period: Annotated[str, typer.Argument(help="YYYY-MM")],
                finalize: Annotated[bool, typer.Option(help="seal them (month ended)")] = False,
                url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: draft (or refresh) every tenant's invoice of a month; --finalize seals."""
    r = api(lambda: connect(url, token).post_json(
        "/invoices/run", {"period": period, "finalize": finalize}))
    if as_json:
        return print_json(r)
    out.print(f"{r['period']}: {r['drafted']} drafted, {r['finalized']} finalized in "
              f"{r['seconds']} s", highlight=False)


@app.command("credit-note")
def credit_note_cmd(invoice_id: str,
                    reason: Annotated[str, typer.Option(help="printed on the note")],
                    amount: Annotated[str | None, typer.Option(
                        help="yuan incl. VAT; default: all that is left")] = None,
                    url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: correct a final invoice; the amount goes back to the tenant's wallet."""
    body: dict[str, str] = {"reason": reason, **({"amount": amount} if amount else {})}
    n = api(lambda: connect(url, token).post_json(f"/invoices/{invoice_id}/credit-notes",
                                                   body))
    out.print(f"{n['number']}: ¥{-Decimal(n['total']):,.2f} credited against "
              f"{n['corrects']}", highlight=False)


@app.command()
def usage(instance: Annotated[str | None, typer.Option(help="one instance")] = None,
          tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
          held: Annotated[bool, typer.Option(help="operator: every tenant's records held "
                                                  "for review")] = False,
          url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
          wide: WideOpt = False) -> None:
    """Metered usage (container GPU-hours, egress, storage), newest first; `--held`:
    records beyond what their instance could use, waiting for review, oldest first."""
    query = "&".join(f"{k}={v}" for k, v in (("instance", instance), ("tenant", tenant)) if v)
    path = "/usage/held" if held else f"/usage?{query}"
    page = api(lambda: connect(url, token).get_json(path))
    if as_json:
        return print_json(page["items"])
    show_table(fitted(
        (Column("id", keep=True, justify="right"), Column("kind", keep=True),
         Column("amount ¥", keep=True, justify="right"), Column("quantity", justify="right"),
         Column("instance"), Column("from"), Column("status"),
         Column("unit price ¥", justify="right"), Column("to"), Column("recorded"),
         Column("key")),
        [(str(u["id"]), u["kind"], f"{Decimal(u['amount']):,.2f}",
          f"{u['quantity']} {u['unit']}", u["instance_id"] or "",
          u["started_at"][:16].replace("T", " "),
          u["status"] + (f": {u['held_reason']}" if u["held_reason"] else ""),
          u["unit_price"], u["ended_at"][:16].replace("T", " "),
          u["recorded_at"][:16].replace("T", " "), u["key"]) for u in page["items"]],
        wide=wide), wide)


@app.command("usage-decide")
def usage_decide(record_id: int, decision: Annotated[str, typer.Argument(
                     help="charge (the usage was real) or reject (never charged)")],
                 url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: decide a held usage record."""
    if decision not in ("charge", "reject"):
        raise typer.BadParameter("charge or reject", param_hint="DECISION")
    u = api(lambda: connect(url, token).post_json(f"/usage/{record_id}/{decision}"))
    out.print(f"usage {u['id']} ({u['key']}): {u['status']}, ¥{Decimal(u['amount']):,.2f}",
              highlight=False)

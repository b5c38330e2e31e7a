"""The money side: wallet and ledger, leases and renewals, webhooks, top-ups and credit
limits, metered usage, invoices and credit notes."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote_plus
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
from gpulease.cli.spend import YesOpt, confirm_spend
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _
from gpulease.domain.billing.leases import local_text

app = typer.Typer()


@app.command()
def wallet(tenant: Annotated[str | None, typer.Option(help="operator: which tenant")] = None,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """The prepaid balance, credit limit and what open orders hold."""
    suffix = f"?tenant={tenant}" if tenant else ""
    w = api(lambda: connect(url, token).get_json(f"/wallet{suffix}"))
    if as_json:
        return print_json(w)
    out.print(_("balance ¥{balance:,.2f}  credit limit ¥{credit_limit:,.2f}  held by "
                "undelivered orders ¥{held:,.2f}  available ¥{available:,.2f}",
                balance=Decimal(w["balance"]), credit_limit=Decimal(w["credit_limit"]),
                held=Decimal(w["held"]), available=Decimal(w["available"])), highlight=False)
    if w.get("suspended_reason"):
        out.print(_("[red]suspended[/red]: {reason}; new orders are refused until you top up",
                    reason=w["suspended_reason"]))
    elif w.get("overdrawn_since"):
        out.print(_("[yellow]overdrawn[/yellow] since {since} UTC: top up before the grace "
                    "ends", since=w["overdrawn_since"][:16]))


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
        (Column(_("at"), keep=True), Column(_("kind"), keep=True),
         Column(_("amount ¥"), keep=True, justify="right"),
         Column(_("balance ¥"), keep=True, justify="right"), Column(_("instance")),
         Column(_("reference"))),
        [(e["at"][:16].replace("T", " "), e["kind"], f"{Decimal(e['amount']):,.2f}",
          f"{Decimal(e['balance_after']):,.2f}", e["instance_id"] or "",
          e["reference"] or "") for e in page["items"]], wide=wide), wide)


def _show_lease(data: dict[str, Any]) -> None:
    zone = ZoneInfo(data.get("time_zone") or "UTC")

    def at(value: str) -> str:
        return local_text(datetime.fromisoformat(value), zone)

    grace = (_(", grace until {until}", until=at(data["grace_until"]))
             if data["grace_until"] else "")
    out.print(_("{instance}: {status}, {periods} period(s), base term {term} at "
                "¥{price:,.2f}, from {starts} to {ends}{grace}; auto-renew {auto_renew}",
                instance=data["instance_id"], status=data["status"], periods=data["periods"],
                term=_(data["term"]), price=Decimal(data["unit_price"]),
                starts=at(data["starts_at"]), ends=at(data["ends_at"]), grace=grace,
                auto_renew=_("on") if data["auto_renew"] else _("off")), highlight=False)
    if len(data.get("schedule") or []) > 1:
        table = Table("#", _("term"), _("from"), _("to"), _("price ¥"), "")
        for p in data["schedule"]:
            table.add_row(str(p["seq"]), _(p["term"]), at(p["starts_at"]), at(p["ends_at"]),
                          f"{Decimal(p['price']):,.2f}", _("refunded") if p["refunded"] else "")
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
          yes: YesOpt = False,
          url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Extend a lease (charged from the wallet now); during grace it cancels the erase."""
    client = connect(url, token)
    body: dict[str, Any] = {"periods": periods}
    if term:
        body["term"] = term
    quote = api(lambda: client.get_json(
        f"/instances/{instance_id}/renewal-quote?periods={periods}"
        + (f"&term={quote_plus(term)}" if term else "")))
    charged = Decimal(quote["total"])
    confirm_spend(_("Renewing {instance} by {periods} × {term} charges",
                    instance=instance_id, periods=periods, term=_(quote["term"])), charged,
                  yes)
    data = api(lambda: client.post_json(f"/instances/{instance_id}/renew", body))
    if as_json:
        return print_json(data)
    out.print(_("charged ¥{amount} from your wallet", amount=f"{charged:,.2f}"),
              highlight=False)
    _show_lease(data)


@app.command()
def addons(instance_id: str, url: UrlOpt = "", token: TokenOpt = "",
           as_json: JsonOpt = False) -> None:
    """A lease's add-ons, past, present and waiting for the end of the paid periods."""
    rows = api(lambda: connect(url, token).every(f"/instances/{instance_id}/addons"))
    if as_json:
        return print_json(rows)
    table = Table(_("add-on"), _("quantity"), _("unit"), _("unit price ¥"), _("since"),
                  _("until"))
    for r in rows:
        table.add_row(_(r["name"]), r["quantity"], _(r["unit"]), r["unit_price"],
                      r["since"][:16],
                      (r["until"] or "")[:16])
    out.print(table)


@app.command()
def addon(instance_id: str, addon_id: Annotated[str, typer.Argument(
              help="public-bandwidth, extra-storage, support-standard, support-premium")],
          quantity: Annotated[str, typer.Argument(help="the new quantity; 0 removes it")],
          yes: YesOpt = False, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Take, raise, lower or remove an add-on on a running lease: more is charged now for
    the paid time left; less takes effect when the paid periods end."""
    client = connect(url, token)
    path = f"/instances/{instance_id}/addons/{addon_id}"
    charged = Decimal(api(lambda: client.post_json(f"{path}/charge",
                                                   {"quantity": quantity}))["charge"])
    if charged > 0:
        confirm_spend(_("{addon} at {quantity} for the paid time left charges",
                        addon=addon_id, quantity=quantity), charged, yes)
    api(lambda: client.put_json(path, {"quantity": quantity}))
    if charged > 0:
        out.print(_("charged ¥{amount} from your wallet", amount=f"{charged:,.2f}"),
                  highlight=False)
    addons(instance_id, url, token)


@app.command("auto-renew")
def auto_renew(instance_id: str, state: Annotated[str, typer.Argument(help="on or off")],
               url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Renew automatically at expiry when the balance allows (else remind, then grace)."""
    if state not in ("on", "off"):
        err.print(_("[red]error[/red]: say on or off"))
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
        out.print(_("webhook removed"))
        return
    data = api(lambda: client.put_json("/webhook", {"url": url}))
    out.print(_("webhook {url}\nsigning secret (shown once): {secret}", url=data["url"],
                secret=data["secret"]), highlight=False)


@app.command("top-up")
def top_up(tenant_id: str, amount: str,
           reference: Annotated[str, typer.Option(help="the payment's reference")],
           url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: record money a tenant paid in."""
    w = api(lambda: connect(url, token).post_json(
        f"/tenants/{tenant_id}/top-ups", {"amount": amount, "reference": reference}))
    out.print(_("{tenant}: balance ¥{balance:,.2f}", tenant=tenant_id,
                balance=Decimal(w["balance"])), highlight=False)


@app.command()
def payout(tenant_id: str, amount: str,
           reference: Annotated[str, typer.Option(help="the refund's bank reference")],
           url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: record wallet balance paid back to the tenant's original payment."""
    w = api(lambda: connect(url, token).post_json(
        f"/tenants/{tenant_id}/payouts", {"amount": amount, "reference": reference}))
    out.print(_("{tenant}: ¥{amount:,.2f} paid out; balance ¥{balance:,.2f}",
                tenant=tenant_id, amount=Decimal(amount), balance=Decimal(w["balance"])),
              highlight=False)


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
    lines = [f"{b['title']} · {b['tax_id'] or _('no taxpayer id')} · "
             f"{'专票 special' if b['invoice_type'] == 'special' else '普票 normal'}",
             f"{b['address']} {b['phone']}".strip(), f"{b['bank']} {b['bank_account']}".strip(),
             _("fapiao to {email}", email=b["email"]) if b["email"] else ""]
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
        out.print(_("wrote {path}", path=csv), highlight=False)
        return None
    return print_json(api(lambda: client.every(f"/invoices/export?period={period}")))


@app.command()
def revenue(start: Annotated[str, typer.Argument(help="first month, YYYY-MM")],
            end: Annotated[str, typer.Argument(help="last month, YYYY-MM")],
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: invoiced net earned month by month over each line's service period."""
    r = api(lambda: connect(url, token).get_json(f"/revenue?start={start}&end={end}"))
    if as_json:
        return print_json(r)
    table = Table(_("month"), _("earned net ¥"))
    for m in r["months"]:
        table.add_row(m["period"], f"{Decimal(m['net']):,.2f}")
    table.add_row(_("total"), f"{Decimal(r['total']):,.2f}")
    out.print(table)


@app.command("dunning")
def dunning_cmd(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: tenants overdrawn, suspended or with unpaid invoices."""
    rows = api(lambda: connect(url, token).every("/dunning"))
    if as_json:
        return print_json(rows)
    table = Table(_("tenant"), _("balance ¥"), _("owed on invoices ¥"), _("unpaid"),
                  _("oldest (days)"), _("overdrawn since"), _("suspended"), _("running"))
    for r in rows:
        table.add_row(f"{r['tenant_name']} ({r['tenant_id']})", f"{Decimal(r['balance']):,.2f}",
                      f"{Decimal(r['owed_on_invoices']):,.2f}",
                      ", ".join(r["unpaid_invoices"]), str(r["oldest_unpaid_days"] or ""),
                      (r["overdrawn_since"] or "")[:16], r["suspended_reason"] or "",
                      ", ".join(r["running"]))
    out.print(table)


@app.command("budget")
def budget(set_to: Annotated[str | None, typer.Option(
        "--set", help="tenant admin: the most to spend in a calendar month, in yuan")] = None,
        remove: Annotated[bool, typer.Option("--remove", help="tenant admin: no budget")]
        = False, url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Your monthly budget and this month's spend against it: told at 50, 80 and 100 %;
    past it, orders and renewals by hand are refused (rented servers keep running)."""
    client = connect(url, token)
    if set_to is not None or remove:
        b = api(lambda: client.put_json("/budget", {
            "monthly_budget": None if remove else set_to}))
    else:
        b = api(lambda: client.get_json("/budget"))
    if as_json:
        return print_json(b)
    if b["monthly_budget"] is None:
        out.print(_("no monthly budget; spent in {period}: ¥{spent:,.2f}",
                    period=b["period"], spent=Decimal(b["spent"])), highlight=False)
        return None
    out.print(_("budget for {period}: ¥{spent:,.2f} of ¥{budget:,.2f} spent ({pct:.0f} %)",
                period=b["period"], spent=Decimal(b["spent"]),
                budget=Decimal(b["monthly_budget"]), pct=b["spent_pct"] or 0.0),
              highlight=False)
    return None


@app.command("credit-limit")
def credit_limit(tenant_id: str, amount: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: let a tenant's orders hold up to this much beyond its balance."""
    w = api(lambda: connect(url, token).put_json(
        f"/tenants/{tenant_id}/credit-limit", {"credit_limit": amount}))
    out.print(_("{tenant}: credit limit ¥{limit:,.2f}", tenant=tenant_id,
                limit=Decimal(w["credit_limit"])), highlight=False)


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
        (Column(_("number"), keep=True), Column(_("period"), keep=True),
         Column(_("total ¥"), keep=True, justify="right"), Column(_("status"), keep=True),
         Column("id"), Column(_("kind")), Column(_("credited ¥"), justify="right"),
         Column(_("net ¥"), justify="right"), Column(_("VAT ¥"), justify="right"),
         Column(_("tenant"))),
        [(i["number"] or _("(draft)"), i["period"], f"{Decimal(i['total']):,.2f}", i["status"],
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
            out.print(_("wrote {path}", path=path), highlight=False)
    if pdf is not None or csv is not None:
        return None
    inv = api(lambda: client.get_json(f"/invoices/{invoice_id}"))
    if as_json:
        return print_json(inv)
    kind = _("Credit note") if inv["kind"] == "credit_note" else _("Invoice")
    paid = {"paid": _(" · paid"), "unpaid": _(" · unpaid, ¥{due:,.2f} due", due=Decimal(
        inv["amount_due"] or 0))}.get(inv.get("payment_status") or "", "")
    out.print(f"{kind} {inv['number'] or _('(draft)')} · {inv['tenant_name']} · "
              f"{inv['period']} · {inv['status']}{paid}"
              + (_(" · corrects {invoice}: {reason}", invoice=inv["corrects"],
                   reason=inv["reason"]) if inv["corrects"] else ""), highlight=False)
    if inv.get("buyer"):
        b = inv["buyer"]
        out.print(_("buyer: {title}", title=b["title"])
                  + (f" ({b['tax_id']})" if b["tax_id"] else ""), highlight=False)
    table = Table("#", _("description"), _("qty"), _("unit price ¥"), _("net ¥"), _("VAT ¥"),
                  _("amount ¥"))
    for ln in inv["lines"]:
        qty = f"{ln['quantity']} {ln['unit'] or ''}" if ln["quantity"] is not None else ""
        table.add_row(str(ln["seq"]), ln["description"], qty, ln["unit_price"] or "",
                      f"{Decimal(ln['net']):,.2f}", f"{Decimal(ln['vat']):,.2f}",
                      f"{Decimal(ln['gross']):,.2f}")
    table.add_row("", _("total (VAT {rate:f}%)", rate=(Decimal(inv["vat_rate"]) * 100)
                        .normalize()), "", "",
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
    out.print(_("{period}: {drafted} drafted, {finalized} finalized in {seconds} s",
                period=r["period"], drafted=r["drafted"], finalized=r["finalized"],
                seconds=r["seconds"]), highlight=False)


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
    out.print(_("{number}: ¥{amount:,.2f} credited against {invoice}", number=n["number"],
                amount=-Decimal(n["total"]), invoice=n["corrects"]), highlight=False)


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
        (Column("id", keep=True, justify="right"), Column(_("kind"), keep=True),
         Column(_("amount ¥"), keep=True, justify="right"),
         Column(_("quantity"), justify="right"), Column(_("instance")), Column(_("from")),
         Column(_("status")), Column(_("unit price ¥"), justify="right"), Column(_("to")),
         Column(_("recorded")), Column(_("key"))),
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
    out.print(_("usage {id} ({key}): {status}, ¥{amount:,.2f}", id=u["id"], key=u["key"],
                status=u["status"], amount=Decimal(u["amount"])), highlight=False)

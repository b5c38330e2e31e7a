"""Tickets: a tenant's own, every one for operators."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from gpulease.cli.common import (
    AllOpt,
    JsonOpt,
    OffsetOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    out,
    pages,
    plain,
    print_json,
    safe,
    say_part,
)
from gpulease.cli.words import _

app = typer.Typer()
ticket_app = typer.Typer(help="One ticket: show, open, comment, ack, swap, repair, window, "
                              "mitigate, resolve.", no_args_is_help=True)
app.add_typer(ticket_app, name="ticket")
NoteOpt = Annotated[str | None, typer.Option(help="what was done or found (the tenant sees "
                                                  "it)")]


def _clocks(t: dict[str, Any]) -> str:
    flags = [_("[red]{clock} breached[/red]", clock=_(c)) for c in t["breached"]]
    flags += [_("[yellow]{clock} at risk[/yellow]", clock=_(c)) for c in t["at_risk"]]
    return ", ".join(flags)


@app.command()
def tickets(
    open_only: Annotated[bool, typer.Option("--open", help="only unresolved ones")] = False,
    status: Annotated[str | None, typer.Option(help="open, acknowledged, mitigated or "
                                               "resolved")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    offset: OffsetOpt = 0, every: AllOpt = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Tickets, newest first: your own (a tenant), or every one (an operator); a page of
    50 (--limit), --all for every one."""
    client = connect(url, token)
    where = ("&open=true" if open_only else "") + (f"&status={status}" if status else "")

    def fetch(size: int, skip: int) -> tuple[list[dict[str, Any]], int]:
        got = api(lambda: client.get_json(f"/tickets?limit={size}&offset={skip}{where}"))
        return list(got["items"]), int(got["total"])

    found, total = pages(fetch, limit, offset, every)
    say_part(len(found), total, offset)
    page = {"items": found, "total": total, "limit": limit, "offset": offset}
    if as_json:
        return print_json(page)
    t = Table(title=_("{count} tickets", count=total))
    for col, typed in (("id", True), (_("sev"), False), (_("status"), False),
                       (_("opened (UTC)"), False), (_("instance"), True)):
        t.add_column(col, no_wrap=True, min_width=15 if typed else None)  # ids: whole
    for col in (_("node/GPU"), _("summary"), "SLA"):
        t.add_column(col, overflow="fold")
    for k in found:
        spot = (k["node"] or "") + (f" GPU {k['gpu']}" if k["gpu"] is not None else "")
        t.add_row(k["id"], k["severity"], k["status"], k["opened_at"][:16].replace("T", " "),
                  k["instance_id"] or "", plain(spot), plain(k["summary"]), _clocks(k))
    out.print(t)


def _show(k: dict[str, Any]) -> None:
    out.print(f"[bold]{k['id']}[/bold] {k['severity']} {k['status']}: {safe(k['summary'])}")
    where = [_("instance {instance}", instance=k["instance_id"]) if k["instance_id"] else "",
             _("node {node}", node=safe(k["node"])) if k["node"] else "",
             f"GPU {k['gpu']}" if k["gpu"] is not None else ""]
    out.print(", ".join(w for w in where if w) or _("(no instance)"))
    for clock in ("response", "mitigation", "resolution"):
        if k[f"{clock}_due"]:
            out.print(_("  {clock} due {at} UTC", clock=_(clock),
                        at=k[f"{clock}_due"][:16].replace("T", " ")))
    flags = _clocks(k)
    if flags:
        out.print("  " + flags)
    if w := k.get("repair_window"):
        state = (_("begun {at}", at=w["begun_at"][:16]) if w["begun_at"] else _("accepted")
                 if w["accepted_at"] else _("waiting for the tenant's answer"))
        out.print(_("  repair window {start} to {end} UTC: {state}",
                    start=w["start"][:16].replace("T", " "),
                    end=w["end"][:16].replace("T", " "), state=state))
    t = Table(_("at (UTC)"), _("what"), _("by"), "", title=_("timeline"))
    for e in k["timeline"]:
        t.add_row(e["at"][:19].replace("T", " "), e["kind"] + (_(" (internal)")
                                                               if e["internal"] else ""),
                  plain(e["actor"]), plain(e["text"]))
    out.print(t)


@ticket_app.command("show")
def show(ticket_id: str, url: UrlOpt = "", token: TokenOpt = "",
         as_json: JsonOpt = False) -> None:
    k = api(lambda: connect(url, token).get_json(f"/tickets/{ticket_id}"))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("open")
def open_ticket(
    instance_id: Annotated[str | None, typer.Argument(
        help="the instance; left out for a question about the account or billing")] = None,
    summary: Annotated[str, typer.Option(help="what is wrong, in one line")] = "",
    gpu: Annotated[int | None, typer.Option(help="the GPU, if one")] = None,
    severity: Annotated[str, typer.Option(help="P1 down, P2 degraded, P3 a question")] = "P2",
    details: Annotated[str | None, typer.Option(help="more, as a first comment")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Report a problem with one of your instances, or ask about your account."""
    if not summary:
        raise typer.BadParameter(_("say in one line what is wrong"), param_hint="--summary")
    body = {"instance_id": instance_id, "summary": summary, "gpu": gpu,
            "severity": severity.upper(), "details": details}
    k = api(lambda: connect(url, token).post_json("/tickets", body))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("comment")
def comment(ticket_id: str, text: str,
            internal: Annotated[bool, typer.Option(help="operators: not shown to the "
                                                   "tenant")] = False,
            url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    k = api(lambda: connect(url, token).post_json(f"/tickets/{ticket_id}/comments",
                                                  {"body": text, "internal": internal}))
    return print_json(k) if as_json else _show(k)


def _action(ticket_id: str, action: str, note: str | None, url: str, token: str,
            as_json: bool) -> None:
    k = api(lambda: connect(url, token).post_json(f"/tickets/{ticket_id}/{action}",
                                                  {"note": note}))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("ack")
def ack(ticket_id: str, note: NoteOpt = None, url: UrlOpt = "", token: TokenOpt = "",
        as_json: JsonOpt = False) -> None:
    """Operator: the first response (stops the response clock)."""
    _action(ticket_id, "ack", note, url, token, as_json)


@ticket_app.command("mitigate")
def mitigate(ticket_id: str, note: NoteOpt = None, url: UrlOpt = "", token: TokenOpt = "",
             as_json: JsonOpt = False) -> None:
    """Operator: the tenant is served again (stops the mitigation clock)."""
    _action(ticket_id, "mitigate", note, url, token, as_json)


@ticket_app.command("swap")
def swap(ticket_id: str, note: NoteOpt = None,
         copy_data: Annotated[bool, typer.Option(
             "--copy-data", help="copy the data disk to the spare first (each file "
             "verified)")] = False,
         path: Annotated[str, typer.Option(help="with --copy-data: what to copy")] = "/data",
         via: Annotated[str, typer.Option(
             help="with --copy-data: 'agents' (straight from server to server) or 'bucket' "
             "(a backup and a restore; the snapshot is kept)")] = "agents",
         url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Operator: replace the ticket's rented node by a spare of the same offer (deployed
    and accepted as at delivery); the faulty one is erased, then out for repair."""
    k = api(lambda: connect(url, token).post_json(
        f"/tickets/{ticket_id}/swap", {"note": note, "copy_data": copy_data, "path": path,
                                       "via": via}))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("repair")
def repair(ticket_id: str,
           start: Annotated[str, typer.Option(help="when the node goes out: ISO 8601 with its "
                                              "zone (2026-12-02T02:00+08:00), or 'now'")],
           hours: Annotated[float, typer.Option(help="how long it may take, at most")] = 4.0,
           note: NoteOpt = None, url: UrlOpt = "", token: TokenOpt = "",
           as_json: JsonOpt = False) -> None:
    """Operator: the card path. Propose a window in which the ticket's rented node is
    repaired in place (powered off, its tenant's disks kept); the tenant accepts it, and
    after `gpulease node repaired` it is burned in and accepted before they have it back."""
    when = start
    if start.strip().lower() == "now":
        when = datetime.now(UTC).isoformat(timespec="seconds")
    body = {"start": when, "hours": hours, "note": note}
    k = api(lambda: connect(url, token).post_json(f"/tickets/{ticket_id}/repair-window", body))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("window")
def window(ticket_id: str,
           accept: Annotated[bool | None, typer.Option(
               "--accept/--decline", help="let the node go out in the proposed window, or "
               "not (the operators then propose another or swap the server)")] = None,
           note: Annotated[str | None, typer.Option(help="for the operators")] = None,
           url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False) -> None:
    """Tenant: answer the repair window an operator proposed on your ticket."""
    if accept is None:
        raise typer.BadParameter("say --accept or --decline", param_hint="--accept/--decline")
    k = api(lambda: connect(url, token).post_json(
        f"/tickets/{ticket_id}/repair-window/answer", {"accept": accept, "note": note}))
    return print_json(k) if as_json else _show(k)


@ticket_app.command("resolve")
def resolve(ticket_id: str, note: NoteOpt = None, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False) -> None:
    """Operator: resolve a ticket (a tenant: withdraw a report of their own)."""
    _action(ticket_id, "resolve", note, url, token, as_json)


@app.command("sla-claims")
def sla_claims(
    status: Annotated[str | None, typer.Option(help="open, confirmed or rejected")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """SLA credits claimed for outages (from tickets' evidence) and failed acceptance: your
    own, or every one (an operator)."""
    page = api(lambda: connect(url, token).get_json(
        "/sla-claims?limit=200" + (f"&status={status}" if status else "")))
    if as_json:
        return print_json(page)
    t = Table(title=_("{count} SLA claims", count=page["total"]))
    t.add_column("id", no_wrap=True, min_width=16)
    for col in (_("instance"), _("kind"), "¥", _("decision"), _("evidence"), _("text")):
        t.add_column(col, overflow="fold")
    for c in page["items"]:
        t.add_row(c["id"], c["instance_id"], c["kind"], str(c["credited"] or c["amount"]),
                  c["decision"] or _("open"), c["evidence"], c["text"])
    out.print(t)


@app.command("sla-decide")
def sla_decide(claim_id: str,
               confirm: Annotated[bool, typer.Option("--confirm/--reject",
                                                     help="credit it, or not")],
               note: NoteOpt = None, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Operator: confirm a claim (credited once, capped per lease period) or reject it."""
    c = api(lambda: connect(url, token).post_json(
        f"/sla-claims/{claim_id}/{'confirm' if confirm else 'reject'}", {"note": note}))
    out.print(f"{c['id']}: {c['decision']}" + (_(", ¥{amount} credited", amount=c["credited"])
                                                if c["credited"] else ""), highlight=False)

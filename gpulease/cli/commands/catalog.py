"""The catalog and what helps choose from it: offers, images, quotes, the sizing advisor."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpulease.cli.commands.platform import check_catalog_file
from gpulease.cli.common import (
    JsonOpt,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    err,
    out,
    parse_addons,
    print_json,
)
from gpulease.cli.tables import Column, WideOpt, fitted
from gpulease.cli.tables import show as show_table
from gpulease.cli.words import _
from gpulease.schemas import SupportClocksView

app = typer.Typer()
image_app = typer.Typer(help="Custom OS images (operators); saved environments (tenants).",
                        no_args_is_help=True)
app.add_typer(image_app, name="image")
catalog_app = typer.Typer(invoke_without_command=True)
app.add_typer(catalog_app, name="catalog")


# ----------------------------------------------------------------------- catalog
@catalog_app.command("check")
def catalog_check(path: Annotated[Path | None, typer.Argument(
        help="the catalog file (default: GPULEASE_CATALOG_FILE, else the built-in one)")]
        = None) -> None:
    """Check a catalog file without starting anything (exit 1 naming file, entry, field)."""
    check_catalog_file(path)


@catalog_app.command("reload")
def catalog_reload(
    file: Annotated[Path | None, typer.Option(
        "--file", help="publish this TOML file (default: the server's own catalog file)")]
    = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Operator: publish a catalog to every API and worker process (no restart)."""
    body: dict[str, str] | None = None
    if file is not None:
        try:
            body = {"text": file.read_text(encoding="utf-8")}
        except (OSError, UnicodeDecodeError) as exc:
            err.print(_("[red]error[/red]: cannot read {path}: {error}", path=file,
                        error=exc))
            raise typer.Exit(2) from None
    v = api(lambda: connect(url, token).post_json("/catalog/reload", body))
    if as_json:
        return print_json(v)
    out.print(_("catalog version {version} in force (sha256 {digest}…, from {source}, by "
                "{by}); every process follows within GPULEASE_CATALOG_FOLLOW_S",
                version=v["id"], digest=v["digest"][:12], source=v["source"],
                by=v["published_by"]), highlight=False)


@catalog_app.callback()
def catalog(ctx: typer.Context, url: UrlOpt = "", token: TokenOpt = "",
            as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """Every offer: GPUs, host, interconnect, prices and stock; and container prices.
    `catalog check FILE` and `catalog reload` for operators."""
    if ctx.invoked_subcommand is not None:
        return
    c = api(lambda: connect(url, token).catalog())
    if as_json:
        return print_json(c)
    t = Table(title=_("Bare-metal offers (CNY)"))
    for col in (_("offer"), _("GPUs"), _("host"), _("interconnect"), _("¥/month"), _("¥/day"),
                _("stock")):
        t.add_column(col, overflow="fold")
    for o in c.offers:
        gpu = o.gpu.replace("NVIDIA ", "").replace("GeForce ", "").replace("Huawei ", "")
        link = o.gpu_interconnect.split(";")[0] + (
            _("\n[yellow]advertised: {link}[/yellow]", link=o.advertised_interconnect)
            if o.advertised_interconnect else "") + ("\n+ InfiniBand" if o.infiniband else "")
        t.add_row(f"{o.sku}\n{o.region} {o.region_name_zh}" + (_("\n[dim]example data[/dim]")
                                                                if o.example else ""),
                  f"{o.gpu_count} × {gpu}", f"{o.cpu}\n{o.memory}\n{o.disks}", link,
                  f"{o.monthly_price:,.2f}" + (
                      _("\n[dim]list {price:,.0f}, -{discount:.0f}%[/dim]",
                        price=o.list_monthly_price, discount=o.discount_percent)
                      if o.discount_percent else "") + "".join(
                      _("\n[yellow]from {date}: {price:,.2f}[/yellow]",
                        date=ch.effective_from, price=ch.monthly_price)
                      for ch in o.price_changes), f"{o.day_price:,.2f}", str(o.stock))
    out.print(t)
    clocks = {o.id: _clocks(o.support) for o in c.offers if o.support is not None}
    if len(set(clocks.values())) == 1:
        out.print(_("Support with every server (response / mitigation / resolution): "
                    "{clocks}", clocks=next(iter(clocks.values()))), highlight=False)
    else:
        for offer_id, said in clocks.items():
            out.print(_("Support with {offer} (response / mitigation / resolution): "
                        "{clocks}", offer=offer_id, clocks=said), highlight=False)
    show_table(fitted(
        (Column(_("offer"), keep=True), Column(_("¥/GPU-hour"), keep=True, justify="right"),
         Column(_("free GPUs"), keep=True, justify="right"),
         Column(_("max GPUs"), justify="right"), Column(_("region")), Column("GPU")),
        [(co.id, f"{co.price_per_gpu_hour:.2f}", str(co.free_gpus), str(co.max_gpus),
          co.region, co.gpu) for co in c.container_offers],
        wide=wide, title=_("Container instances (per GPU-hour)")), wide)
    out.print(_("Derived prices: {rule}", rule=c.pricing_rule))


def _clocks(support: SupportClocksView) -> str:
    """`P1 15 min / 4 h / 72 h; P2 …`: each severity's clocks, "-" where it has none."""
    def hours(clock: dict[str, Decimal], sev: str) -> str:
        return f"{clock[sev]:g} h" if sev in clock else "-"
    return "; ".join(
        f"{sev} " + (f"{support.response_minutes[sev]:g} min" if sev in support.response_minutes
                     else "-") + f" / {hours(support.mitigation_hours, sev)} / "
        f"{hours(support.resolution_hours, sev)}" for sev in ("P1", "P2", "P3"))


@app.command()
def images(url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
           wide: WideOpt = False) -> None:
    """OS images; each offer has a default, so --image may be left out."""
    items = api(lambda: connect(url, token).images())
    if as_json:
        return print_json(items)
    show_table(fitted(
        (Column("id", keep=True), Column(_("GPUs"), keep=True), Column(_("name")),
         Column(_("software"))),
        [(i.id, i.gpu_vendor, i.name, ", ".join(i.software)) for i in items], wide=wide), wide)


@image_app.command("add")
def image_add(
    image_id: Annotated[str, typer.Option("--id", help="e.g. ubuntu24.04-cuda12.8")],
    name: Annotated[str, typer.Option()],
    image_url: Annotated[str, typer.Option("--image-url", help="http(s) URL of the image")],
    checksum: Annotated[str, typer.Option(help="sha256:<64 hex digits>")],
    os_name: Annotated[str, typer.Option("--os", help="e.g. Ubuntu 24.04 LTS")],
    gpu_vendor: Annotated[str, typer.Option(help="nvidia, huawei or any")] = "nvidia",
    software: Annotated[list[str] | None, typer.Option(help="preinstalled (repeatable)")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """Add a custom OS image by URL and checksum."""
    from gpulease.schemas import ImageCreate

    try:
        body = ImageCreate(id=image_id, name=name, os=os_name, gpu_vendor=gpu_vendor,
                           url=image_url, checksum=checksum, software=software or [])
    except ValueError as exc:
        err.print(_("[red]error[/red]: {error}", error=exc))
        raise typer.Exit(2) from None
    image = api(lambda: connect(url, token).add_image(body))
    if as_json:
        return print_json(image)
    out.print(_("added image {image}", image=image.id))


@image_app.command("remove")
def image_remove(image_id: str, url: UrlOpt = "", token: TokenOpt = "") -> None:
    """Remove a custom OS image that no live instance uses."""
    api(lambda: connect(url, token).remove_image(image_id))
    out.print(_("removed image {image}", image=image_id))


# ----------------------------------------------------------------------- ordering
@app.command()
def quote(
    sku: Annotated[str, typer.Option(help="SKU id, e.g. h100-80g-x8")],
    region: Annotated[str, typer.Option(help="region id, e.g. ningxia-1")],
    term: Annotated[str, typer.Option(help="day, month or year")] = "month",
    count: Annotated[int, typer.Option(help="periods of the term, e.g. 3 (months)")] = 1,
    servers: Annotated[int, typer.Option(help="servers (a cluster's nodes)")] = 1,
    add: Annotated[list[str] | None, typer.Option(
        help="add-on NAME=QUANTITY, repeatable: public-bandwidth=100 (Mbps), "
        "extra-storage=2000 (GB), egress=500 (GB), support-standard=1")] = None,
    days_per_week: Annotated[float | None, typer.Option(
        help="usage pattern: compare paying by the day with the month")] = None,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False,
) -> None:
    """The full fee list of a lease before ordering it."""
    body: dict[str, Any] = {"sku": sku, "region": region, "term": term, "count": count,
                            "servers": servers, "add": parse_addons(add)}
    if days_per_week is not None:
        body["days_per_week"] = str(days_per_week)
    q = api(lambda: connect(url, token).post_json("/quotes", body))
    if as_json:
        return print_json(q)
    table = Table(_("item"), _("quantity"), _("unit"), _("unit price ¥"), _("amount ¥"),
                  title=_("Quote: {sku} in {region}, {count} {term}(s) × {servers} "
                          "server(s)", sku=q["sku"], region=q["region"], count=q["count"],
                          term=_(q["term"]), servers=q["servers"]))
    for line in q["lines"]:
        mark = _(" (example price)") if line["example_price"] else ""
        table.add_row(_(line["description"]) + mark, str(line["quantity"]), _(line["unit"]),
                      f"{Decimal(line['unit_price']):,.2f}", f"{Decimal(line['amount']):,.2f}")
    out.print(table)
    vat = _("included") if q["prices_include_vat"] else _("added")
    out.print(_("[bold]total ¥{total:,.2f}[/bold]  (VAT {rate:.0%} {vat}: ¥{amount:,.2f}; net "
                "¥{net:,.2f})", total=Decimal(q["total"]), vat=vat,
                rate=Decimal(q["vat_rate"]), amount=Decimal(q["vat"]),
                net=Decimal(q["net"])), highlight=False)
    out.print(_("early termination: {terms}", terms=q["early_termination"]), highlight=False)
    cheapest = ", ".join(_("{region} ¥{price:,.2f}/month", region=r["region"],
                           price=Decimal(r["monthly_price"])) for r in q["regions"])
    out.print(_("regions for {sku}, cheapest first: {regions}", sku=q["sku"],
                regions=cheapest), highlight=False)
    if q["break_even"]:
        b = q["break_even"]
        out.print(_("{days} day(s) a week: by the day ¥{by_day:,.2f}/month vs by the month "
                    "¥{by_month:,.2f}: the {cheaper} term is cheaper (break-even {even} days "
                    "a month)", days=b["days_per_week"], by_day=Decimal(b["by_day_per_month"]),
                    by_month=Decimal(b["by_month"]), cheaper=_(b["cheaper"]),
                    even=b["break_even_days_per_month"]), highlight=False)
    for note in q["notes"]:
        out.print(_("note: {note}", note=_(note)), highlight=False)


@app.command()
def advise(
    params: Annotated[str | None, typer.Option(help="model size: 7B, 70B, 350M")] = None,
    workload: Annotated[str, typer.Option(
        help="inference, pretrain, full-finetune, lora, qlora")] = "full-finetune",
    precision: Annotated[str, typer.Option(help="fp32, bf16, fp16, fp8, int8, int4")] = "bf16",
    seq_len: Annotated[int, typer.Option("--seq-len", help="tokens per sequence")] = 4096,
    batch: Annotated[int, typer.Option(help="micro-batch per GPU (sequences)")] = 1,
    checkpointing: Annotated[bool, typer.Option(help="activation checkpointing")] = True,
    tokens: Annotated[float | None, typer.Option(help="tokens to process (e.g. 2e9)")] = None,
    hours: Annotated[float | None, typer.Option(help="planned hours")] = None,
    budget: Annotated[str | None, typer.Option(help="yuan")] = None,
    gpu: Annotated[str | None, typer.Option(help="only this GPU id")] = None,
    domestic: Annotated[bool, typer.Option(help="domestic hardware (Ascend 910B)")] = False,
    layers: Annotated[int | None, typer.Option()] = None,
    hidden: Annotated[int | None, typer.Option()] = None,
    heads: Annotated[int | None, typer.Option()] = None,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads")] = None,
    vocab: Annotated[int | None, typer.Option()] = None,
    ffn: Annotated[int | None, typer.Option(help="MLP inner width")] = None,
    experts: Annotated[int, typer.Option(help="MoE experts")] = 1,
    top_k: Annotated[int, typer.Option("--top-k", help="MoE experts per token")] = 1,
    bias: Annotated[bool, typer.Option(help="linear layers carry biases")] = False,
    tied_embeddings: Annotated[bool, typer.Option(
        "--tied-embeddings", help="the output head shares the embedding matrix")] = False,
    learned_positions: Annotated[int, typer.Option(
        "--learned-positions", help="rows of a learned position table; 0: rotary")] = 0,
    post_norm: Annotated[bool, typer.Option(
        "--post-norm", help="post-LN blocks (BERT), no final norm")] = False,
    url: UrlOpt = "", token: TokenOpt = "", as_json: JsonOpt = False, wide: WideOpt = False,
) -> None:
    """Size a job: memory term by term, the machines that fit ranked by total cost, time,
    bare metal or container and why."""
    body = {k: v for k, v in dict(
        params=params, workload=workload, precision=precision, seq_len=seq_len, batch=batch,
        checkpointing=checkpointing, tokens=tokens, hours=hours, budget=budget, gpu=gpu,
        domestic=domestic, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        vocab=vocab, ffn=ffn, experts=experts, top_k=top_k, bias=bias,
        tied_embeddings=tied_embeddings, learned_positions=learned_positions,
        post_norm=post_norm).items() if v is not None}
    a = api(lambda: connect(url, token).post_json("/advise", body))
    if as_json:
        return print_json(a)
    out.print(_("[bold]{billions:,.2f}B parameters[/bold]", billions=a["params"] / 1e9)
              + (_(" (shape inferred)") if a["shape_inferred"] else "")
              + _(" · quick estimate: {estimate}", estimate=a["quick_estimate"]),
              highlight=False)
    mem = Table(_("memory"), "GB", _("why"), title=_("Memory of the whole job: {gb:,.1f} GB",
                                                      gb=a["total_gb"]))
    for m in a["memory"]:
        mem.add_row(m["name"], f"{m['gb']:,.2f}", m["why"])
    out.print(mem)
    show_table(fitted(
        (Column("#", keep=True, justify="right"), Column(_("offer"), keep=True),
         Column(_("cost ¥"), keep=True, justify="right"), Column(_("GPUs"), justify="right"),
         Column(_("hours"), justify="right"), Column(_("stock")), Column(_("term")),
         Column("GB/GPU", justify="right"), Column(_("kind")), Column(_("layout"))),
        [(str(n), o["offer"], f"{Decimal(o['cost']):,.2f}", str(o["gpus"]),
          f"{o['hours']:,.1f}", str(o["stock"]) + ("" if o["in_stock"] else _(" (short)")),
          f"{o['periods']} {_(o['term'])}",
          f"{o['memory_per_gpu_gb']:.1f}/{o['memory_usable_gb']:.0f}",
          o["kind"].replace("_", " "), o["layout"]) for n, o in enumerate(a["options"], 1)],
        wide=wide, title=_("Options in stock and within budget first, then by total cost "
                           "({work})", work=a["work"])), wide)
    if a["options"]:
        best = a["options"][0]
        out.print(_("Per GPU in option 1 ({layout}): ", layout=best["layout"]) + ", ".join(
            f"{k} {v:,.1f} GB" for k, v in best["per_gpu_gb"].items()), highlight=False)
    out.print(_("[bold]Recommendation:[/bold] {text}", text=a["recommendation"]),
              highlight=False)
    for w in a["warnings"]:
        out.print(_("[yellow]warning:[/yellow] {text}", text=w), highlight=False)

"""Running the platform itself: `up`, `serve`, `worker`, `migrate`, `states`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gpulease.cli.common import (
    err,
    out,
)
from gpulease.cli.words import _
from gpulease.compose import make_platform

app = typer.Typer()


# ----------------------------------------------------------------------- platform
# Options given on the command line win; otherwise the environment (GPULEASE_*), then the
# built-in defaults, as for every other setting.
DataDirOpt = Annotated[Path | None, typer.Option(
    help="where SQLite, keys and tokens live (env GPULEASE_DATA_DIR; default .gpulease)")]
PortOpt = Annotated[int | None, typer.Option(
    help="port to listen on (env GPULEASE_PORT; default 8000)")]
HostOpt = Annotated[str | None, typer.Option(
    help="address to listen on (env GPULEASE_HOST; default 127.0.0.1)")]


def _settings(**overrides: Any) -> Any:
    from gpulease.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _running(start: Callable[[], object]) -> None:
    """Run the platform; a database that never answered, or a schema this release cannot
    use, is one line, exit code 1."""
    from gpulease.data_dir import DataDirBusy, DataDirUnusable
    from gpulease.db.session import DatabaseUnreachable, SchemaBehind, SchemaTooNew
    from gpulease.domain.catalog import CatalogError
    from gpulease.services.platform.keys import KeyMismatch, KeyMissing

    try:
        start()
    except (DatabaseUnreachable, SchemaTooNew, SchemaBehind, KeyMismatch, KeyMissing,
            CatalogError, DataDirBusy, DataDirUnusable) as exc:
        err.print(f"[red]error[/red]: {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


@app.command()
def up(
    data_dir: DataDirOpt = None,
    port: PortOpt = None,
    host: HostOpt = None,
    demo_delay: Annotated[float, typer.Option(help="simulated seconds per stage")] = 2.0,
    nodes_per_offer: Annotated[int, typer.Option(help="demo nodes per offer")] = 4,
    database_url: Annotated[str | None, typer.Option(envvar="GPULEASE_DATABASE_URL")] = None,
    bmc: Annotated[str, typer.Option(help=(
        "demo servers' BMCs: 'redfish' (behind a sushy-tools emulator: the production "
        "Redfish code) or 'simulated' (instant, with fault injection)"))]
    = "redfish",
    emulator_port: Annotated[int | None, typer.Option(help="with --bmc redfish; default port+1")]
    = None,
    lab: Annotated[Path | None, typer.Option(help=(
        "the folder of a lab made by `gpulease lab up`: its virtual servers are enrolled and "
        "its offer is on sale"))] = None,
) -> None:
    """Start the API, the worker and a demo fleet of simulated servers (behind a Redfish
    emulator by default); with --lab, the lab's virtual servers too."""
    from gpulease.lab import lab as labs
    from gpulease.server import PortInUse
    from gpulease.server import up as run_up

    if bmc not in ("simulated", "redfish"):
        err.print(_("[red]error[/red]: --bmc takes 'simulated' or 'redfish'"))
        raise typer.Exit(2)
    found = labs.load(lab.resolve()) if lab is not None else None
    if lab is not None and found is None:
        err.print(_("[red]error[/red]: no lab in {folder}: `gpulease lab up` makes one",
                    folder=lab))
        raise typer.Exit(2)
    settings = _settings(data_dir=data_dir, port=port, host=host, demo_delay_s=demo_delay,
                         demo_nodes_per_offer=nodes_per_offer, database_url=database_url)
    try:
        _running(lambda: run_up(settings, say=out.print, bmc=bmc, emulator_port=emulator_port,
                                lab=found))
    except PortInUse as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def serve(
    data_dir: DataDirOpt = None,
    port: PortOpt = None,
    host: HostOpt = None,
    workers: Annotated[int, typer.Option(
        min=1, max=64, help="API processes sharing the port (PostgreSQL for more than one)"
    )] = 1,
) -> None:
    """Start the API only (run workers separately with `gpulease worker`)."""
    from gpulease.server import PortInUse
    from gpulease.server import serve as run_serve

    settings = _settings(data_dir=data_dir, port=port, host=host)
    try:
        _running(lambda: run_serve(settings, workers))
    except PortInUse as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def worker(
    data_dir: DataDirOpt = None,
    threads: Annotated[int | None, typer.Option(help="worker threads")] = None,
    demo_delay: Annotated[float | None, typer.Option(help="simulated seconds per stage")] = None,
    site: Annotated[str | None, typer.Option(
        help="serve only this site's servers (a catalog [[sites]] id; env "
             "GPULEASE_WORKER_SITE); unset: every site without a worker of its own")] = None,
) -> None:
    """Run a provisioning worker; any number may share one PostgreSQL database."""

    from gpulease.api.guards import configure_logging
    from gpulease.server import run_worker

    settings = _settings(data_dir=data_dir, demo_delay_s=demo_delay, worker_site=site)
    configure_logging(settings.log_level, settings.log_format)
    _running(lambda: run_worker(settings, threads))


@app.command()
def migrate(
    data_dir: DataDirOpt = None,
    check: Annotated[bool, typer.Option(
        "--check", help="change nothing; exit 0 when current, 1 when migrations are "
        "pending, 2 when the database is newer than this gpulease or does not answer, 3 "
        "when this process's secret key is not the installation's")
    ] = False,
    current: Annotated[bool, typer.Option(
        "--current", help="print the database's migration and this release's latest")
    ] = False,
) -> None:
    """Apply database migrations, under a lock (every start does this too unless
    GPULEASE_MIGRATE_AT_START=false)."""
    from gpulease.db.session import DatabaseUnreachable, SchemaTooNew
    from gpulease.server import prepare
    from gpulease.services.platform import keys

    settings = _settings(data_dir=data_dir)
    if check or current:
        platform = make_platform(settings)
        try:
            platform.db.wait_until_reachable(min(settings.db_wait_s, 10.0))
            at, head = platform.db.schema()
            ours = at != head or keys.key_is_installations(platform)  # a current schema
        except (DatabaseUnreachable, SchemaTooNew) as exc:
            err.print(f"[red]error[/red]: {exc}", highlight=False)
            raise typer.Exit(2) from None
        finally:
            platform.db.dispose()
        if not ours:
            err.print(_("[red]error[/red]: this process's secret key is not the one this "
                        "database's secrets are sealed under: give it the installation's "
                        "GPULEASE_SECRET_KEY (or key file)"), highlight=False)
            raise typer.Exit(3)
        if current:
            out.print(_("database: {at}   this release: {head}", at=at or _("none"),
                        head=head), highlight=False)
        if check:
            if at == head:
                out.print(_("the database is current ({head})", head=head), highlight=False)
                return
            out.print(_("migrations pending: the database is at {at}, this release at "
                        "{head}; run `gpulease migrate`", at=at or _("none"), head=head),
                      highlight=False)
            raise typer.Exit(1)
        return
    settings.migrate_at_start = True
    _running(lambda: prepare(settings).db.dispose())
    out.print(_("database is at the latest migration"))


@app.command("operator-create")
def operator_create(
    email: Annotated[str, typer.Option(help="the operator's e-mail (their sign-in)")],
    name: Annotated[str | None, typer.Option(help="display name")] = None,
    expires_in_days: Annotated[int, typer.Option(
        "--expires-in-days", min=1, max=3650, help="the token's life (default 90)")] = 90,
    data_dir: DataDirOpt = None,
) -> None:
    """Make an operator on this platform's database and print its API token, once (the
    first operator of a new installation; later ones too)."""
    from gpulease.domain.errors import DomainError
    from gpulease.server import prepare
    from gpulease.services.accounts import identity as accounts

    settings = _settings(data_dir=data_dir)

    def create() -> None:
        platform = prepare(settings)
        try:
            _user, token = accounts.create_operator(platform, email,
                                                    name or email.split("@")[0],
                                                    expires_in_days)
        except DomainError as exc:
            err.print(f"[red]error[/red]: {exc.detail}", highlight=False)
            raise typer.Exit(1) from None
        finally:
            platform.db.dispose()
        out.print(_("operator {email}: token (shown once, valid until {until:%Y-%m-%d}):",
                    email=email, until=token.expires_at), highlight=False)
        print(token.secret())

    _running(create)


key_app = typer.Typer(help="The secret key that seals passwords and keys the audit trail.",
                      no_args_is_help=True)
app.add_typer(key_app, name="key")


@key_app.command("rotate")
def key_rotate(
    new_key: Annotated[str | None, typer.Option(
        "--new-key", envvar="GPULEASE_NEW_SECRET_KEY",
        help="the new Fernet key (default: a fresh one, printed once)")] = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Re-seal every secret and re-key the audit chain (verified intact first) under a new
    key, in one transaction. Stop every process first; start them with the new key."""
    from cryptography.fernet import Fernet

    from gpulease.domain.errors import DomainError
    from gpulease.server import prepare
    from gpulease.services.platform import keys

    settings = _settings(data_dir=data_dir)
    fresh = new_key or Fernet.generate_key().decode()

    def rotate() -> None:
        platform = prepare(settings)
        try:
            counts = keys.rotate(platform, fresh)
        except (DomainError, ValueError) as exc:
            err.print(f"[red]error[/red]: {getattr(exc, 'detail', exc)}", highlight=False)
            raise typer.Exit(1) from None
        finally:
            platform.db.dispose()
        key_file = settings.data_dir / "secret.key"
        if not settings.secret_key and key_file.exists():
            key_file.write_text(fresh)  # the embedded default keeps its key in the data dir
            out.print(_("re-sealed {counts}; the new key is in {path}", counts=counts,
                        path=key_file), highlight=False)
            return
        out.print(_("re-sealed {counts}. Give every process the new key before starting it "
                    "(GPULEASE_SECRET_KEY), and back it up with the database:",
                    counts=counts), highlight=False)
        if not new_key:
            print(fresh)

    _running(rotate)


@app.command("catalog-check")
def catalog_check(
    path: Annotated[Path | None, typer.Argument(
        help="the catalog file (default: GPULEASE_CATALOG_FILE, else the built-in one)")
    ] = None,
) -> None:
    """Check a catalog file without starting anything: OK with what it holds, or the first
    problem in one line naming the file, the entry and the field (exit 1)."""
    check_catalog_file(path)


def check_catalog_file(path: Path | None) -> None:
    from gpulease.domain.catalog import CatalogError, load_catalog

    chosen = path or (_settings().catalog_file or None)
    try:
        catalog = load_catalog(Path(chosen) if chosen else None)
    except CatalogError as exc:
        err.print(f"[red]error[/red]: {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    out.print(_("{source}: OK: {gpus} GPUs, {skus} SKUs, {offers} offers, {containers} "
                "container offers, {images} images", source=catalog.source,
                gpus=len(catalog.gpus), skus=len(catalog.skus), offers=len(catalog.offers),
                containers=len(catalog.container_offers), images=len(catalog.images)),
              highlight=False)


@app.command("config")
def config(data_dir: DataDirOpt = None, port: PortOpt = None, host: HostOpt = None,
           as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The effective settings (command line, then GPULEASE_* environment, then defaults),
    secrets masked."""
    import json

    from gpulease.settings import effective

    shown = effective(_settings(data_dir=data_dir, port=port, host=host))
    if as_json:
        print(json.dumps(shown, indent=2, default=str))
        return
    width = max(len(k) for k in shown)
    for key, value in shown.items():
        out.print(f"{key.ljust(width)}  {value}", highlight=False, markup=False)


@app.command()
def states(
    machine: Annotated[str | None, typer.Argument(help="one lifecycle's Mermaid diagram, "
                                                       "e.g. 'node' or 'lease'")] = None,
    update: Annotated[Path | None, typer.Option(help="rewrite the generated chapter of this "
                                                     "Markdown file in place")] = None,
) -> None:
    """Every declared lifecycle (states, events, side effects) as Markdown with Mermaid
    diagrams: the chapter docs/architecture.md carries."""
    from gpulease.cli import lifecycles
    from gpulease.cli.lifecycles import chapter, diagram, names

    if update is not None:
        update.write_text(lifecycles.update(update.read_text()))
        out.print(f"{update}: lifecycle chapter regenerated")
        return
    if machine is None:
        print(chapter())
        return
    try:
        print(diagram(machine))
    except KeyError:
        err.print(_("[red]error[/red]: no lifecycle {machine!r}; known: {known}",
                    machine=machine, known=", ".join(names())))
        raise typer.Exit(2) from None

"""Running the platform itself: `up`, `serve`, `worker`, `migrate`, `states`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulease.cli.common import (
    err,
    out,
)

app = typer.Typer()


# ----------------------------------------------------------------------- platform
def _settings(**overrides: Any) -> Any:
    from gpulease.settings import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _running(start: Callable[[], object]) -> None:
    """Run the platform; a database that never answered is one line, exit code 1."""
    from gpulease.db.session import DatabaseUnreachable

    try:
        start()
    except DatabaseUnreachable as exc:
        err.print(f"[red]error[/red]: {exc}", highlight=False)
        raise typer.Exit(1) from None


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option(help="where SQLite, keys and tokens live")] = Path(
        ".gpulease"),
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8000,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    demo_delay: Annotated[float, typer.Option(help="simulated seconds per stage")] = 2.0,
    nodes_per_offer: Annotated[int, typer.Option(help="demo nodes per offer")] = 2,
    database_url: Annotated[str | None, typer.Option(envvar="GPULEASE_DATABASE_URL")] = None,
    bmc: Annotated[str, typer.Option(help=(
        "demo servers' BMCs: 'redfish' (behind a sushy-tools emulator: the production "
        "Redfish code) or 'simulated' (instant, with fault injection)"))]
    = "redfish",
    emulator_port: Annotated[int | None, typer.Option(help="with --bmc redfish; default port+1")]
    = None,
) -> None:
    """Start the API, the worker and a demo fleet of simulated servers (behind a Redfish
    emulator by default)."""
    from gpulease.server import PortInUse
    from gpulease.server import up as run_up

    if bmc not in ("simulated", "redfish"):
        err.print("[red]error[/red]: --bmc takes 'simulated' or 'redfish'")
        raise typer.Exit(2)
    settings = _settings(data_dir=data_dir, port=port, host=host, demo_delay_s=demo_delay,
                         demo_nodes_per_offer=nodes_per_offer, database_url=database_url)
    try:
        _running(lambda: run_up(settings, say=out.print, bmc=bmc, emulator_port=emulator_port))
    except PortInUse as exc:
        err.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(1) from None


@app.command()
def serve(
    data_dir: Annotated[Path, typer.Option()] = Path(".gpulease"),
    port: Annotated[int, typer.Option()] = 8000,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
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
    data_dir: Annotated[Path, typer.Option()] = Path(".gpulease"),
    threads: Annotated[int | None, typer.Option(help="worker threads")] = None,
    demo_delay: Annotated[float | None, typer.Option(help="simulated seconds per stage")] = None,
) -> None:
    """Run a provisioning worker; any number may share one PostgreSQL database."""
    import logging

    from gpulease.api.guards import configure_logging
    from gpulease.server import run_worker

    configure_logging(logging.INFO)
    settings = _settings(data_dir=data_dir, demo_delay_s=demo_delay)
    _running(lambda: run_worker(settings, threads))


@app.command()
def migrate(data_dir: Annotated[Path, typer.Option()] = Path(".gpulease")) -> None:
    """Apply database migrations (also done at every start)."""
    from gpulease.server import prepare

    settings = _settings(data_dir=data_dir)
    _running(lambda: prepare(settings).db.dispose())
    out.print("database is at the latest migration")


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
        err.print(f"[red]error[/red]: no lifecycle {machine!r}; known: {', '.join(names())}")
        raise typer.Exit(2) from None

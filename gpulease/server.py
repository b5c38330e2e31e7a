"""Starting the platform: `up` (API + worker + demo fleet), `serve` (API), `worker`."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from sqlalchemy.exc import IntegrityError

from gpulease.api.app import create_app
from gpulease.api.guards import configure_logging
from gpulease.cli.words import _
from gpulease.compose import make_platform
from gpulease.data_dir import DataDirHold
from gpulease.data_dir import hold as hold_data_dir
from gpulease.db.session import safe_url
from gpulease.demo import (
    OPERATOR_LOGIN_FILE,
    enroll_lab,
    ensure_demo_console_login,
    ensure_demo_tokens,
    seed_demo_fleet,
)
from gpulease.demo_agents import DemoAgents
from gpulease.domain.errors import Conflict
from gpulease.lab.lab import LAB_OFFER, Lab, guest_url
from gpulease.platform import Platform
from gpulease.settings import Settings
from gpulease.worker.runner import Worker

log = logging.getLogger("gpulease")


def prepare(settings: Settings, publish_catalog: bool = False) -> Platform:
    """The platform on a reachable, migrated database: waits for the database first (with
    backoff, up to db_wait_s; raises DatabaseUnreachable after that); the published
    catalog adopted (`publish_catalog`: this process's file becomes the newest version)."""
    from gpulease.services.catalog.versions import adopt
    from gpulease.services.platform import audit
    from gpulease.services.platform.keys import check_key, require_shared_key

    os.umask(0o077)  # what this process writes (database, keys, tokens, state) is its own
    require_shared_key(settings.resolved_database_url(), settings.secret_key)
    platform = make_platform(settings)
    platform.db.wait_until_reachable(
        settings.db_wait_s,
        lambda why, pause: log.warning("waiting for the database at %s (%s); next try in "
                                       "%.1f s", safe_url(platform.db.url), why, pause))
    if settings.migrate_at_start:
        platform.db.migrate()
    else:
        platform.db.require_current()
    check_key(platform)
    audit.seal(platform)  # an older release's chain head is sealed; a broken one reported
    adopt(platform, publish_file=publish_catalog)
    return platform


def bootstrap_operator(platform: Platform, say: Callable[[str], object] = log.warning) -> None:
    """GPULEASE_BOOTSTRAP_OPERATOR_EMAIL on a platform without operators: make the first
    one and write its token (expiring like any) to <data_dir>/operator.token, 0600; the
    token itself is never logged."""
    from gpulease.services.accounts import identity as accounts

    email = platform.settings.bootstrap_operator_email.strip()
    if not email or accounts.operator_count(platform):
        return
    try:
        _operator, token = accounts.create_operator(platform, email, email.split("@")[0])
    except (Conflict, IntegrityError):
        # another host's `serve` made it between the count and here: its token file is
        # on that host, and this one starts without writing any
        say(_("first operator {email} was made by another process starting at the same "
              "time; its token is in that host's data directory", email=email))
        return
    path = Path(platform.settings.data_dir) / "operator.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token.secret() + "\n")
    until = f"{token.expires_at:%Y-%m-%d}" if token.expires_at else _("no end")
    say(_("first operator {email} made; its token (valid until {until}) is in {path}: read "
          "it, then delete the file", email=email, until=until, path=path))


def up(settings: Settings, say: Callable[[str], object] = print,
       bmc: str = "redfish", emulator_port: int | None = None, lab: Lab | None = None
       ) -> None:
    """`_up` on the data dir, held for this process first (one `up` at a time; it can be
    written; helpers left by an `up` that died are ended): data_dir.py."""
    held = hold_data_dir(settings.data_dir)
    settings.data_dir = held.path  # absolute: the helpers' command lines name it
    try:
        _up(settings, say, bmc, emulator_port, lab, held)
    finally:
        held.release()


def _up(settings: Settings, say: Callable[[str], object], bmc: str,
        emulator_port: int | None, lab: Lab | None, held: DataDirHold) -> None:
    """The embedded default: SQLite in the data dir, a built-in worker, a demo fleet. With
    bmc="redfish" (the default) the demo servers sit behind a sushy-tools Redfish emulator,
    so the demo drives the same Redfish code as production; "simulated" is instant and
    takes injected faults. The demo's simulated hardware is on (its drivers are built).
    With `lab` (`gpulease lab up`), its catalog (the lab's offer added) and its virtual
    servers, enrolled through their BMC; they reach this platform at the lab's guest
    address."""
    settings.simulated_hardware = True
    url = f"http://{settings.host}:{settings.port}"
    if lab is not None:
        settings.catalog_file = Path(lab.folder) / "catalog.toml"
        settings.guest_url = guest_url(settings.port)
    require_free_port(settings.host, settings.port, "--port")
    if bmc == "redfish":
        require_free_port("127.0.0.1", emulator_port or settings.port + 1, "--emulator-port")
    emulator = None
    if bmc == "redfish":
        settings.public_url = url
        settings.media_base_url = f"{url}/media/images"
        write_demo_images(settings)
    s3 = None
    if not settings.s3_endpoint:  # tenants' object storage: SeaweedFS under the data dir
        from gpulease.drivers.seaweedfs import start_embedded_s3

        s3 = start_embedded_s3(settings.data_dir / "s3", port=_port_or_any(settings.port + 2))
        held.record_child(s3.process.pid, "SeaweedFS")
        settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key = (
            s3.url, s3.access_key, s3.secret_key)
    registry = None
    if not settings.registry:  # tenants' saved images: docker-registry, when installed
        from gpulease.drivers import registry as registries

        if registries.available():
            try:
                registry = registries.start_registry(settings.data_dir / "registry",
                                                     port=_port_or_any(settings.port + 3))
                held.record_child(registry.process.pid, "docker-registry")
                settings.registry = registry.address
            except BaseException:
                if s3 is not None:
                    s3.stop()
                raise
    try:
        platform = prepare(settings, publish_catalog=True)  # its own embedded database
    except BaseException:
        for started in (s3, registry):
            if started is not None:
                started.stop()
        raise
    if bmc == "redfish":
        emulator, redfish = start_demo_emulator(platform, emulator_port or settings.port + 1)
        added = seed_demo_fleet(platform, settings.demo_nodes_per_offer, redfish)
    else:
        added = seed_demo_fleet(platform, settings.demo_nodes_per_offer)
    enrolled = enroll_lab(platform, lab) if lab is not None else []
    op_token, tenant_token = ensure_demo_tokens(platform, settings.data_dir)
    console_login = ensure_demo_console_login(platform, settings.data_dir, tenant_token)
    operator_login = ensure_demo_console_login(platform, settings.data_dir, op_token,
                                               OPERATOR_LOGIN_FILE)
    worker = Worker(platform, site=settings.worker_site)
    worker.start()
    telemetry = DemoAgents(platform)
    telemetry.start()
    say(_("gpulease listening on {url}  (API {url}/api/v1, docs {url}/api/v1/docs)", url=url))
    say(_("database: {dialect} ({url})", dialect=platform.db.dialect,
          url=_shown_url(platform.db.url)))
    if emulator is not None:
        say(_("demo fleet: {added} servers behind a Redfish emulator at {url} (SIMULATED "
              "hardware, real Redfish; power changes land after 1-11 s)",
              added=added or _("existing"), url=emulator.url))
    else:
        say(_("demo fleet: {added} simulated nodes, {delay:g} s per stage (SIMULATED "
              "hardware)", added=added or _("existing"), delay=settings.demo_delay_s))
    if lab is not None:
        say(_("lab: {count} virtual servers ({accel}), offer {offer}; enrolled now: {enrolled}",
              count=len(lab.servers), accel=lab.accel, offer=LAB_OFFER,
              enrolled=", ".join(enrolled) or _("none (enrolled before)")))
    if s3 is not None:
        say(_("object storage:    {url} (SeaweedFS S3; `gpulease storage` for your bucket)",
              url=s3.url))
    if registry is not None:
        say(_("image registry:    {address} (docker-registry; `gpulease image save`)",
              address=registry.address))
    say(_("operator token:    {path}", path=op_token))
    say(_("demo tenant token: {path}", path=tenant_token))
    say(_("web console:       {url}/console  (e-mail and password: {tenant}; an operator's: "
          "{operator})", url=url, tenant=console_login, operator=operator_login))
    say(_("try:  export GPULEASE_URL={url} GPULEASE_TOKEN=$(cat {path})", url=url,
          path=tenant_token.resolve()))
    say("      gpulease catalog")
    # the demo's terminal stays readable: warnings only, unless a level was asked for
    level = None if "log_level" in settings.model_fields_set else "WARNING"
    try:
        _serve(platform, settings, level)
    finally:
        telemetry.stop()
        worker.stop()
        platform.db.dispose()
        if emulator is not None:
            emulator.stop()
        if s3 is not None:
            s3.stop()
        if registry is not None:
            registry.stop()


def _port_or_any(port: int, wait_s: float = 10.0) -> int | None:
    """`port` when it is free on loopback, else None (any free one). Probed as a server
    binds it (SO_REUSEADDR: the last run's connections waiting out TIME_WAIT do not hold
    it), and waited for a while (the last run's process may still be stopping): the
    endpoint the demo gave tenants stays the same across restarts."""
    deadline = time.monotonic() + wait_s
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
                probe.listen()
                return port
            except OSError:
                pass
        if time.monotonic() >= deadline:
            log.warning("port %d on 127.0.0.1 is still taken after %.0f s: another one is "
                        "used, and the address changes", port, wait_s)
            return None
        time.sleep(0.25)


class PortInUse(RuntimeError):
    """Something already listens where `up` would: said before anything starts."""


def require_free_port(host: str, port: int, option: str) -> None:
    with socket.socket() as probe:
        # As a server binds (address reuse on), so only a live listener counts as in use.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise PortInUse(
                f"{host}:{port} is in use ({exc.strerror}); another `gpulease up` may still be "
                f"running. Stop it, or pick another port with {option}.") from exc


DEMO_IMAGE_NOTE = b"gpulease demo: a placeholder image for simulated servers\n"


def write_demo_images(settings: Settings) -> None:
    """Placeholder image files the demo's emulated BMCs fetch (they download what they
    insert); served at /media/images/. Real images come from the operator's image server."""
    from gpulease.domain.catalog import load_catalog

    folder = settings.data_dir / "media" / "images"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"{i.id}.iso" for i in load_catalog(settings.catalog_file).images]
    for name in [*names, "agent-ramdisk.iso"]:
        if not (folder / name).exists():
            (folder / name).write_bytes(DEMO_IMAGE_NOTE)


def start_demo_emulator(platform: Platform, port: int) -> tuple[Any, tuple[list[str], str, str]]:
    """One sushy-tools emulator serving a Redfish system per demo node."""
    import secrets

    from gpulease.demo import demo_node_names
    from gpulease.drivers.redfish_emulator import Rack, start_emulator

    settings = platform.settings
    folder = settings.data_dir / "emulator"
    folder.mkdir(parents=True, exist_ok=True)
    secret_file = folder / "bmc.password"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_urlsafe(16))
        secret_file.chmod(0o600)
    password = secret_file.read_text().strip()
    count = len(demo_node_names(platform, settings.demo_nodes_per_offer))
    rack = Rack(count=count, power="Off", nics=[2] * count,
                power_delay_s=settings.demo_bmc_power_delay_s)
    emulator = start_emulator(folder, port, rack, username="admin", password=password)
    urls = [emulator.system_url(i) for i in range(count)]
    return emulator, (urls, "admin", password)


def serve(settings: Settings, workers: int = 1) -> None:
    """The API: one process, or `workers` processes sharing the port (uvicorn's
    supervisor: SIGHUP replaces them one at a time, each new one in service before its
    old one leaves; SIGTTIN/SIGTTOU add or remove one). Migrations run once, here, before
    any of them starts."""
    platform = prepare(settings)
    bootstrap_operator(platform)
    if workers <= 1:
        try:
            _serve(platform, settings)
        finally:
            platform.db.dispose()
        return
    platform.db.dispose()
    configure_logging(settings.log_level, settings.log_format)
    # Each process builds its settings from the environment, as this one did, with the
    # command line's own values put there (never the secret key: the data dir holds it).
    os.environ.update({"GPULEASE_DATA_DIR": str(settings.data_dir),
                       "GPULEASE_HOST": settings.host, "GPULEASE_PORT": str(settings.port)})
    if settings.database_url:
        os.environ["GPULEASE_DATABASE_URL"] = settings.database_url
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config("gpulease.server:api_process", factory=True, host=settings.host,
                            port=settings.port, workers=workers, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=30,
                            log_config=None,  # its lines in our format (JSON too)
                            # a new process must import and build the app before it is in
                            # service: 5 s (uvicorn's default) aborted restarts on a busy
                            # 2-core host; a hung process is still found within 30 s
                            timeout_worker_healthcheck=30,
                            proxy_headers=True,
                            forwarded_allow_ips=settings.forwarded_allow_ips)
    Multiprocess(config, sockets=[_listening_socket(settings.host, settings.port)]).run()


def _listening_socket(host: str, port: int) -> socket.socket:
    """The port the API processes share. Made with its protocol named (IPPROTO_TCP):
    asyncio turns Nagle's algorithm off only on connections whose socket says TCP, and
    uvicorn's own shared socket leaves it unnamed, which cost every small answer a 40 ms
    delayed-ACK stall (measured: 44 ms p50 for /healthz with 2 processes, 1 ms with one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def api_process() -> Any:
    """One API process of `serve --workers N` (the database is migrated already)."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(make_platform(settings))


def run_worker(settings: Settings, threads: int | None = None) -> None:
    from gpulease.services.platform.control_metrics import serve_worker_metrics

    platform = prepare(settings)
    worker = Worker(platform, site=settings.worker_site)
    worker.start(threads)
    stop_metrics = serve_worker_metrics(platform)
    if stop_metrics is not None:
        log.info("worker metrics on http://%s:%d/metrics", settings.worker_metrics_host,
                 settings.worker_metrics_port)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    log.info("worker %s running (%s)", worker.owner,
             f"site {worker.site}" if worker.site else "every site without its own workers")
    stop.wait()
    worker.stop()
    if stop_metrics is not None:
        stop_metrics()
    platform.db.dispose()


def _exit_cleanly_on_sigterm(*_: object) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def _serve(platform: Platform, settings: Settings, level: str | None = None) -> None:
    configure_logging(level or settings.log_level, settings.log_format)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again once its own
    # handlers are gone. With the default action the process would die right there, before
    # the caller's cleanup (worker, emulator) runs; as SystemExit, the cleanup runs.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_cleanly_on_sigterm)
    config = uvicorn.Config(create_app(platform), host=settings.host, port=settings.port,
                            log_level="warning", access_log=False, proxy_headers=True,
                            log_config=None,  # its lines in our format (JSON too)
                            forwarded_allow_ips=settings.forwarded_allow_ips)
    uvicorn.Server(config).run()


def _shown_url(url: str) -> str:
    return str(Path(url.split(":///", 1)[-1])) if url.startswith("sqlite") else safe_url(url)

"""`gpulease agent`: the node agent's command line (run on each rented server)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from gpulease.cli.common import TerminalConsole
from gpulease.cli.words import _

agent_app = typer.Typer(
    help="The node agent: GPU telemetry at /metrics, acceptance checks, certified erase.",
    invoke_without_command=True)
out = TerminalConsole()
err = TerminalConsole(stderr=True)

BackendOpt = Annotated[str, typer.Option(
    "--backend", help="GPU backend: nvml, npu-smi (Ascend), simulated, or auto (NVML, then "
    "npu-smi, where one loads)")]
FaultOpt = Annotated[list[str] | None, typer.Option(
    "--fault", help="simulated backend: inject KIND[:GPU[:ARG]] (thermal, xid79, xid:GPU:N, "
    "unhealthy, nvlink-down, slow-gpu, ecc-dbe, row-remap)")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="simulated backend: GPU count")]
ModelOpt = Annotated[str, typer.Option("--model", help="simulated backend: GPU model id")]


def _backend(name: str, gpus: int, model: str, faults: list[str] | None):  # type: ignore[no-untyped-def]
    from gpulease.agent.gpu.backend import BackendUnavailable
    from gpulease.agent.gpu.backends import open_backend

    try:
        return open_backend(name, gpus=gpus, model=model, faults=tuple(faults or ()))
    except (BackendUnavailable, ValueError) as exc:
        err.print(_("[red]error[/red]: {error}", error=exc))
        raise typer.Exit(2) from None


@agent_app.callback()
def run(
    ctx: typer.Context,
    backend: BackendOpt = "auto",
    listen: Annotated[str, typer.Option(help="HOST:PORT for /metrics")] = "0.0.0.0:9400",
    interval: Annotated[float, typer.Option(help="seconds between sample sweeps")] = 1.0,
    gpus: GpusOpt = 8,
    model: ModelOpt = "h100-80g",
    fault: FaultOpt = None,
    hostname: Annotated[str | None, typer.Option(help="Hostname label")] = None,
    control_plane: Annotated[str | None, typer.Option(
        "--control-plane", envvar="GPULEASE_CONTROL_PLANE",
        help="control plane URL to phone home to and push summaries")] = None,
    enroll_token_file: Annotated[Path | None, typer.Option(
        help="one-time enrollment token: the config drive's agent.env, or a file holding "
        "the token")] = Path("/etc/gpulease/agent.env"),
    credential_file: Annotated[Path, typer.Option(
        help="where the per-node credential is kept after enrollment")] = Path(
        "/var/lib/gpulease-agent/credential"),
    push_interval: Annotated[float, typer.Option(help="seconds between pushes")] = 60.0,
    command_poll: Annotated[float, typer.Option(
        help="seconds between polls for the control plane's commands")] = 5.0,
    fio_target: Annotated[str | None, typer.Option(
        help="data disk for the acceptance suite's read-only fio checks")] = None,
    erase_device: Annotated[list[str] | None, typer.Option(
        help="disk an erase command erases (repeatable; default: every disk but /'s)")] = None,
    allow_erase: Annotated[bool, typer.Option(
        help="carry out erase commands (the cleaning ramdisk's agent only)")] = False,
    burnin: Annotated[float | None, typer.Option(
        help="burn-in seconds for verify commands (default: the offer's)")] = None,
    fio_runtime: Annotated[float, typer.Option(help="seconds per fio job in verify")] = 10,
    copy_bind: Annotated[str, typer.Option(
        help="address a swap's copy is served on from this server (its port comes with "
        "the command: GPULEASE_COPY_PORT)")] = "0.0.0.0",
    system_root: Annotated[Path, typer.Option(
        help="the system the tenant's SSH keys and root password are written into when the "
        "node passed its acceptance (configure)")] = Path("/"),
) -> None:
    """Run the agent: sample every GPU, serve /metrics, phone home when told where."""
    if ctx.invoked_subcommand is not None:
        return
    from gpulease.agent.gpu.sampler import Sampler
    from gpulease.agent.server import AgentServer, AgentState

    host, _sep, port = listen.rpartition(":")
    if not host or not port.isdigit():
        err.print(_("[red]error[/red]: --listen {listen!r}: expected HOST:PORT, e.g. "
                    "127.0.0.1:9400", listen=listen))
        raise typer.Exit(2)
    gpu_backend = _backend(backend, gpus, model, fault)
    sampler = Sampler(gpu_backend, interval_s=interval)
    sampler.start()
    state = AgentState(gpu_backend, sampler, hostname, backend_name=backend)
    server = AgentServer(state, host, int(port))
    server.start()
    label = " (SIMULATED GPUs)" if gpu_backend.simulated else ""
    out.print(_("gpulease agent{label}: {gpus} GPU(s), metrics at {url}", label=label,
                gpus=len(gpu_backend.devices()), url=f"http://{host}:{server.port}/metrics"),
              highlight=False)
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    phone = None
    if control_plane:
        from gpulease.agent.phonehome import Cadence, Keys, NodeOptions, PhoneHome

        phone = PhoneHome(control_plane, state, Keys(credential_file, enroll_token_file),
                          listen_port=server.port,
                          cadence=Cadence(push_s=push_interval, command_poll_s=command_poll),
                          options=NodeOptions(
                              fio_target=fio_target, erase_devices=tuple(erase_device or ()),
                              allow_erase=allow_erase, burnin_s=burnin,
                              fio_runtime_s=fio_runtime, copy_bind=copy_bind,
                              system_root=system_root))
        phone.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if phone:
            phone.stop()
        server.stop()
        sampler.stop()
        gpu_backend.close()


@agent_app.command("verify")
def verify(
    backend: BackendOpt = "auto",
    gpus: GpusOpt = 8,
    model: ModelOpt = "h100-80g",
    fault: FaultOpt = None,
    offer: Annotated[str | None, typer.Option(
        help="SKU@REGION whose pass marks apply (default: the catalog's first offer "
        "with this GPU model)")] = None,
    fio_target: Annotated[str | None, typer.Option(
        help="data disk (device or file) for the read-only fio checks")] = None,
    fio_size: Annotated[str | None, typer.Option(help="fio --size for a file target")] = None,
    fio_runtime: Annotated[float, typer.Option(help="seconds per fio job")] = 10,
    burnin: Annotated[float | None, typer.Option(
        help="burn-in seconds (default: the offer's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    report_file: Annotated[Path | None, typer.Option(help="also write the JSON here")] = None,
) -> None:
    """Run the acceptance suite on this node. Exit code 0 = passed, 1 = failed."""
    from gpulease.agent.gpu.checks import SuiteOptions, run_suite
    from gpulease.agent.offers import marks_for

    gpu_backend = _backend(backend, gpus, model, fault)
    try:
        thresholds, spec = marks_for(offer, gpu_backend, model)
    except LookupError as exc:
        err.print(_("[red]error[/red]: {error}", error=exc))
        raise typer.Exit(2) from None
    report = run_suite(gpu_backend, thresholds, spec, SuiteOptions(
        fio_target=fio_target, fio_size=fio_size, fio_runtime_s=fio_runtime, burnin_s=burnin))
    data = report.as_dict()
    if report_file:
        report_file.write_text(json.dumps(data, indent=2))
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(report.summary())
    raise typer.Exit(0 if report.passed else 1)


@agent_app.command("erase")
def erase(
    device: Annotated[str, typer.Argument(help="whole disk, e.g. /dev/nvme1n1")],
    yes: Annotated[bool, typer.Option("--yes", help="confirm: every byte is destroyed")] = False,
    certificate: Annotated[Path | None, typer.Option(
        help="write the erase certificate (JSON) here")] = None,
    lease: Annotated[str | None, typer.Option(help="lease (instance) id for the record")] = None,
    samples: Annotated[int, typer.Option(help="verification reads")] = 256,
) -> None:
    """Erase one disk after NIST SP 800-88 and certify it. Exit 1 if verification fails."""
    from gpulease.agent.erase import EraseError, erase_device

    if not yes:
        err.print(_("[red]refused[/red]: erasing {device} destroys all its data; add --yes "
                    "to confirm", device=device))
        raise typer.Exit(2)
    try:
        cert = erase_device(device, lease=lease, samples=samples)
    except (EraseError, OSError) as exc:
        err.print(_("[red]erase failed[/red]: {error}", error=exc))
        raise typer.Exit(1) from None
    data = json.dumps(cert.as_dict(), indent=2)
    if certificate:
        certificate.write_text(data)
    out.print(_("{device}: {method} ({level}), verification {verdict} over {samples} sampled "
                "reads; certificate {certificate}", device=device, method=cert.method,
                level=cert.nist_level, verdict=_("passed") if cert.passed else _("FAILED"),
                samples=cert.verification["samples"], certificate=cert.id)
              + (_(" written to {path}", path=certificate) if certificate else ""),
              highlight=False)
    if not certificate:
        print(data)
    raise typer.Exit(0 if cert.passed else 1)

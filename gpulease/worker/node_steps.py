"""What each deploy and clean stage asks of the hardware. Pure I/O through the ports:
no database here. Each step returns ADVANCE (stage done) or WAIT (poll again)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from gpulease.domain.acceptance import GpuSpec, Report, Thresholds
from gpulease.domain.states import CleanStage, DeployStage
from gpulease.platform import Platform
from gpulease.ports.agent import Agent, AgentError, NodeConfig, NodeRef
from gpulease.ports.bmc import (
    Bmc,
    BmcEndpoint,
    BmcPermanentError,
    BootDevice,
    MediaSlot,
    PowerState,
)
from gpulease.services import agent_commands


class Outcome(Enum):
    ADVANCE = "advance"
    WAIT = "wait"


@dataclass(frozen=True)
class NodeJob:
    """A snapshot of what a step needs, read before the I/O starts."""

    node_id: str
    node_name: str
    stage: str
    bmc_driver: str
    endpoint: BmcEndpoint
    instance_id: str | None
    image_url: str
    agent_media_url: str
    ssh_keys: tuple[str, ...]
    root_password: str
    hostname: str
    polls: int = 0  # how often this stage has polled already
    config_drive_url: str | None = None
    acceptance: tuple[Thresholds, GpuSpec] | None = None  # the offer's pass marks
    agent_kind: str = "builtin"  # builtin: the driver registry's agent; gpulease: commands
    stage_started_at: datetime | None = None
    boot: str = "virtual_media"  # the offer's: virtual_media | uefi_http | pxe
    http_boot_uri: str | None = None  # UEFI HTTP boot: the loader's URL (None: from DHCP)


@dataclass
class StepResult:
    outcome: Outcome
    ip_address: str | None = None
    note: str | None = None
    report: Report | None = None  # the acceptance suite's (VERIFY)
    certificates: tuple[dict[str, Any], ...] = ()  # erase certificates (ERASE)


def _bmc(p: Platform, job: NodeJob) -> Bmc:
    return p.drivers.bmc_for(job.bmc_driver, job.endpoint)


# A power request is sent once per stage and then only polled (some BMCs restart the
# transition on every request); it is sent again only after this many silent polls.
REREQUEST_EVERY_POLLS = 120


def _power(p: Platform, job: NodeJob, target: PowerState) -> StepResult:
    bmc = _bmc(p, job)
    if bmc.power_state() == target:
        return StepResult(Outcome.ADVANCE)
    if job.polls % REREQUEST_EVERY_POLLS == 0:
        bmc.power_on() if target == PowerState.ON else bmc.power_off()
    return StepResult(Outcome.ADVANCE if bmc.power_state() == target else Outcome.WAIT)


def power_off(p: Platform, job: NodeJob) -> StepResult:
    return _power(p, job, PowerState.OFF)


def power_on(p: Platform, job: NodeJob) -> StepResult:
    return _power(p, job, PowerState.ON)


def _boot_from(p: Platform, job: NodeJob, image_url: str) -> StepResult:
    """Point the server at what it boots next: the image as virtual media; or the network,
    by UEFI HTTP boot or PXE, whose loader (iPXE) chains to the control plane's
    /media/ipxe, which serves this node's kernel and NoCloud seed while it deploys or
    cleans. The config drive goes in the BMC's virtual USB slot where there is one;
    network boots also read it as a NoCloud seed over HTTP."""
    bmc = _bmc(p, job)
    bmc.eject_media()
    if job.config_drive_url:
        try:
            bmc.insert_media(job.config_drive_url, MediaSlot.USB)
        except BmcPermanentError:
            if job.boot == "virtual_media":
                raise  # network boots read the seed over HTTP instead
    if job.boot == "uefi_http":
        bmc.set_one_time_boot(BootDevice.UEFI_HTTP, http_boot_uri=job.http_boot_uri)
        return StepResult(Outcome.ADVANCE, note="UEFI HTTP boot (the loader chains to "
                                                "/media/ipxe)")
    if job.boot == "pxe":
        bmc.set_one_time_boot(BootDevice.PXE)
        return StepResult(Outcome.ADVANCE, note="PXE boot (iPXE chains to /media/ipxe)")
    bmc.insert_media(image_url)
    bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
    return StepResult(Outcome.ADVANCE)


def attach_media(p: Platform, job: NodeJob) -> StepResult:
    return _boot_from(p, job, job.image_url)


def _agent(p: Platform, job: NodeJob) -> Agent:
    return p.drivers.agent_for(job.bmc_driver)


def _ref(job: NodeJob) -> NodeRef:
    return NodeRef(job.node_name, job.bmc_driver, job.endpoint)


# --- the real node agent: a command filed once per stage, its result awaited -----------

def _command(p: Platform, job: NodeJob, kind: str, payload: dict[str, Any]
             ) -> dict[str, Any] | None:
    """The command's result once the agent posted it; None while it is pending. Raises
    AgentError (not retryable: the agent already tried) when the agent reports failure."""
    cmd = agent_commands.latest(p, job.node_id, kind, job.stage, job.stage_started_at)
    if cmd is None:
        with p.db.write() as s:
            agent_commands.submit(s, p, job.node_id, job.instance_id, kind, job.stage, payload,
                                  p.clock.now())
        return None
    if cmd.status == "failed":
        err = AgentError(f"node agent {kind} failed: {cmd.error}")
        err.retryable = False
        raise err
    if cmd.status != "done":
        return None
    result: dict[str, Any] = json.loads(cmd.result_json or "{}")
    return result


def wait_agent(p: Platform, job: NodeJob) -> StepResult:
    if job.agent_kind == "gpulease":
        up = agent_commands.agent_seen_since(p, job.node_id, job.stage_started_at)
        return StepResult(Outcome.ADVANCE if up else Outcome.WAIT)
    return StepResult(Outcome.ADVANCE if _agent(p, job).is_up(_ref(job)) else Outcome.WAIT)


def configure(p: Platform, job: NodeJob) -> StepResult:
    if job.agent_kind == "gpulease":
        # cloud-init applied the config drive (hostname, keys, password hash, data disk);
        # the agent confirms it and reports the address the tenant will use.
        done = _command(p, job, "configure", {"hostname": job.hostname,
                                              "ssh_keys": list(job.ssh_keys)})
        if done is None:
            return StepResult(Outcome.WAIT)
        return StepResult(Outcome.ADVANCE, ip_address=str(done["ip_address"]))
    result = _agent(p, job).configure(
        _ref(job),
        NodeConfig(hostname=job.hostname, ssh_keys=job.ssh_keys,
                   root_password=job.root_password),
    )
    return StepResult(Outcome.ADVANCE, ip_address=result.ip_address)


def verify(p: Platform, job: NodeJob) -> StepResult:
    if job.acceptance is None:
        return StepResult(Outcome.ADVANCE, note="no acceptance marks for this node's offer")
    if job.agent_kind == "gpulease":
        thresholds, spec = job.acceptance
        done = _command(p, job, "verify", {"thresholds": thresholds.as_dict(),
                                           "spec": asdict(spec)})
        if done is None:
            return StepResult(Outcome.WAIT)
        report = agent_commands.report_from(done)
    else:
        report = _agent(p, job).verify(_ref(job), *job.acceptance)
    verdict = "passed" if report.passed else "FAILED"
    label = " (simulated)" if report.simulated else ""
    return StepResult(Outcome.ADVANCE, report=report,
                      note=f"acceptance {verdict}{label}: {len(report.checks)} checks, "
                           f"{len(report.failures)} failed")


def detach_media(p: Platform, job: NodeJob) -> StepResult:
    _bmc(p, job).eject_media()
    return StepResult(Outcome.ADVANCE)


def attach_agent_media(p: Platform, job: NodeJob) -> StepResult:
    # The cleaning ramdisk, booted like the image; its config drive (when the real agent
    # runs) carries the ramdisk agent's enrollment token.
    return _boot_from(p, job, job.agent_media_url)


def erase(p: Platform, job: NodeJob) -> StepResult:
    if job.agent_kind == "gpulease":
        done = _command(p, job, "erase", {"lease": job.instance_id})
        if done is None:
            return StepResult(Outcome.WAIT)
        certs = tuple(done.get("certificates", ()))
        return StepResult(Outcome.ADVANCE, certificates=certs,
                          note=f"erased {', '.join(c['device'] for c in certs) or 'no disk'} "
                               "by the node agent")
    result = _agent(p, job).erase(_ref(job), lease=job.instance_id)
    label = " (simulated)" if result.simulated else ""
    return StepResult(Outcome.ADVANCE, certificates=result.certificates,
                      note=f"erased {', '.join(result.devices)} by {result.method}{label}")


def clean_power_off(p: Platform, job: NodeJob) -> StepResult:
    _bmc(p, job).eject_media()
    return _power(p, job, PowerState.OFF)


STEPS: dict[str, Callable[[Platform, NodeJob], StepResult]] = {
    DeployStage.POWER_OFF.value: power_off,
    DeployStage.ATTACH_MEDIA.value: attach_media,
    DeployStage.POWER_ON.value: power_on,
    DeployStage.WAIT_AGENT.value: wait_agent,
    DeployStage.CONFIGURE.value: configure,
    DeployStage.VERIFY.value: verify,
    DeployStage.DETACH_MEDIA.value: detach_media,
    CleanStage.SHUTDOWN.value: power_off,
    CleanStage.ATTACH_MEDIA.value: attach_agent_media,
    CleanStage.POWER_ON.value: power_on,
    CleanStage.WAIT_AGENT.value: wait_agent,
    CleanStage.ERASE.value: erase,
    CleanStage.POWER_OFF.value: clean_power_off,
}

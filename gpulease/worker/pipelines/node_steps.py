"""What each deploy and clean stage asks of the hardware, through the BMC and agent ports
(the real agent's port files its command and answers Pending until the agent posts the
result). Each step returns ADVANCE (stage done) or WAIT (poll again)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

from gpulease.domain.fleet.acceptance import GpuSpec, Report, Thresholds
from gpulease.domain.fleet.polling import FAST_FOR_S, power_ignored, power_request_due
from gpulease.domain.phrases import Phrase, phrase
from gpulease.domain.states import NodeStage
from gpulease.platform import Platform
from gpulease.ports.agent import Agent, NodeConfig, NodeRef, Pending
from gpulease.ports.bmc import (
    Bmc,
    BmcEndpoint,
    BmcPermanentError,
    BootDevice,
    MediaSlot,
    PowerState,
)
from gpulease.services.agents.node_agent import agent_for
from gpulease.services.fleet import media_check, ramdisk_boots
from gpulease.services.fleet.ramdisk_boots import BootAsk, RamdiskFailed
from gpulease.worker.pipelines.fence import Fence, fenced_agent, fenced_bmc


class Outcome(Enum):
    ADVANCE = "advance"
    WAIT = "wait"


@dataclass(frozen=True)
class StepInput:
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
    requests: int = 0  # power requests this stage has sent (domain/fleet/polling.py)
    config_drive_url: str | None = None
    acceptance: tuple[Thresholds, GpuSpec] | None = None  # the offer's pass marks
    agent_kind: str = "builtin"  # which agent answers (services/agents/node_agent.py)
    stage_started_at: datetime | None = None
    boot: str = "virtual_media"  # the offer's: virtual_media | uefi_http | pxe
    http_boot_uri: str | None = None  # UEFI HTTP boot: the loader's URL (None: from DHCP)
    encrypted_data: bool = False  # the data disk left unformatted for the tenant's key
    deploy: str = "installer"  # the offer's: installer | image (the deploy ramdisk writes it)
    image_id: str = ""
    region: str = ""  # the node's: its site's image cache serves its image deploys
    # the claim every hardware call is checked against first (fence.py); None: unfenced
    fence: Fence | None = field(default=None, compare=False)


@dataclass
class StepResult:
    outcome: Outcome
    ip_address: str | None = None
    note: str | Phrase | None = None
    report: Report | None = None  # the acceptance suite's (VERIFY)
    certificates: tuple[dict[str, Any], ...] = ()  # erase certificates (ERASE)
    requested: bool = False  # a power request went to the BMC (counted per stage)
    event: str = "advance"  # the node stage's event when it advances (domain/states.py)


def _bmc(p: Platform, job: StepInput) -> Bmc:
    return fenced_bmc(p.drivers.bmc_for(job.bmc_driver, job.endpoint), job.fence)


def _elapsed(p: Platform, job: StepInput) -> float:
    started = job.stage_started_at
    return (p.clock.now() - started).total_seconds() if started is not None else 0.0


def _power(p: Platform, job: StepInput, target: PowerState) -> StepResult:
    """One read of the power state a poll; a request when one is due (domain/fleet/polling.py),
    read once more in a stage's first seconds; a BMC that ignores the requests fails the
    stage saying so (the node goes to maintenance)."""
    bmc = _bmc(p, job)
    state = bmc.power_state()
    if state == target:
        return StepResult(Outcome.ADVANCE)
    elapsed = _elapsed(p, job)
    verb = "power on" if target == PowerState.ON else "power off"
    if power_ignored(job.requests, elapsed):
        raise BmcPermanentError(
            f"the BMC ignores power requests: {job.requests} × {verb} over {elapsed:.0f} s "
            f"and the power is still {state.value}; check the BMC (or reset it) and the "
            "server's power supply")
    if not power_request_due(job.requests, elapsed):
        return StepResult(Outcome.WAIT)
    bmc.power_on() if target == PowerState.ON else bmc.power_off()
    landed = elapsed < FAST_FOR_S and bmc.power_state() == target
    return StepResult(Outcome.ADVANCE if landed else Outcome.WAIT, requested=True)


def power_off(p: Platform, job: StepInput) -> StepResult:
    return _power(p, job, PowerState.OFF)


def power_on(p: Platform, job: StepInput) -> StepResult:
    return _power(p, job, PowerState.ON)


def _boot_from(p: Platform, job: StepInput, image_url: str) -> StepResult:
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
        return StepResult(Outcome.ADVANCE, note=phrase("UEFI HTTP boot (the loader chains "
                                                       "to /media/ipxe)"))
    if job.boot == "pxe":
        bmc.set_one_time_boot(BootDevice.PXE)
        return StepResult(Outcome.ADVANCE,
                          note=phrase("PXE boot (iPXE chains to /media/ipxe)"))
    bmc.insert_media(image_url)
    bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
    return StepResult(Outcome.ADVANCE)


def attach_media(p: Platform, job: StepInput) -> StepResult:
    if job.deploy == "image":
        return _boot_ramdisk(p, job, "write")
    if job.boot == "virtual_media":
        media_check.require_served(p, job.image_url)  # a 404 is the order's, once
    return _boot_from(p, job, job.image_url)


def _boot_ramdisk(p: Platform, job: StepInput, action: str) -> StepResult:
    """The deploy ramdisk as virtual media (one-time CD boot), with its plan: write the
    offer's image, or erase every disk. The config drive waits for the boot from disk."""
    if action == "write":
        with p.db.read() as s:  # from its site's image cache, where it has one
            plan = ramdisk_boots.write_plan(ramdisk_boots.image_source(s, p, job.image_id,
                                                                       job.region or None))
    else:
        plan = ramdisk_boots.ERASE_PLAN
    url = ramdisk_boots.open_boot(p, BootAsk(job.node_id, job.instance_id, job.stage, action,
                                             plan))
    bmc = _bmc(p, job)
    bmc.eject_media()
    bmc.insert_media(url, MediaSlot.CD)
    bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
    return StepResult(Outcome.ADVANCE, note=phrase("the deploy ramdisk ({action})",
                                                   action=action))


def deploy_power_on(p: Platform, job: StepInput) -> StepResult:
    """On into the installer; an image deploy's ramdisk goes on to write the image."""
    result = _power(p, job, PowerState.ON)
    if job.deploy == "image":
        result.event = "image"
    return result


def write_image(p: Platform, job: StepInput) -> StepResult:
    """Until the ramdisk reports: the image checked, written and read back, or why not
    (a wrong checksum writes nothing and fails the deploy)."""
    reported = ramdisk_boots.report_of(p, job.node_id, "write")
    if reported is None:
        return StepResult(Outcome.WAIT)
    report = reported.fields
    failed = ramdisk_boots.write_failure(report)
    if failed:
        raise RamdiskFailed(failed, node_fault=not ramdisk_boots.image_at_fault(report))
    seconds = int(report.get("write_cs", "0") or 0) / 100
    return StepResult(Outcome.ADVANCE, note=phrase(
        "image written to {disk} in {seconds:.0f} s and read back: sha256 {sha}",
        disk=report.get("disk", "?"), seconds=seconds, sha=report.get("sha256", "?")[:16]))


RAMDISK_OFF_WITHIN_S = 120  # after its report the ramdisk syncs and powers off by itself


def boot_disk(p: Platform, job: StepInput) -> StepResult:
    """Once the ramdisk has powered the server off: the config drive in the CD slot (the
    ramdisk's place), a one-time boot from disk, power on."""
    bmc = _bmc(p, job)
    if bmc.power_state() != PowerState.OFF:
        if _elapsed(p, job) > RAMDISK_OFF_WITHIN_S:  # it reported, then did not power off
            bmc.power_off()
        return StepResult(Outcome.WAIT)
    if not job.config_drive_url:
        raise RamdiskFailed("no config drive for the installed system's first boot")
    bmc.eject_media()
    bmc.insert_media(job.config_drive_url, MediaSlot.CD)
    bmc.set_one_time_boot(BootDevice.DISK)
    bmc.power_on()
    return StepResult(Outcome.ADVANCE, requested=True)


def _agent(p: Platform, job: StepInput) -> Agent:
    return fenced_agent(agent_for(p, job.agent_kind, job.bmc_driver), job.fence)


def _ref(job: StepInput) -> NodeRef:
    return NodeRef(job.node_id, job.node_name, job.bmc_driver, job.endpoint,
                   instance_id=job.instance_id, stage=job.stage,
                   stage_started_at=job.stage_started_at)


def wait_agent(p: Platform, job: StepInput) -> StepResult:
    return StepResult(Outcome.ADVANCE if _agent(p, job).is_up(_ref(job)) else Outcome.WAIT)


def configure(p: Platform, job: StepInput) -> StepResult:
    result = _agent(p, job).configure(
        _ref(job),
        NodeConfig(hostname=job.hostname, ssh_keys=job.ssh_keys,
                   root_password=job.root_password,
                   data_disk_mount="" if job.encrypted_data else "/data"),
    )
    if isinstance(result, Pending):
        return StepResult(Outcome.WAIT)
    if result.cloud_init == "done":  # the installed system says what it was configured with
        wanted = job.hostname.split(".")[0].lower()
        if result.hostname and HOSTNAME.fullmatch(wanted) and result.hostname.lower() != wanted:
            raise ConfigMismatch(f"the installed system calls itself {result.hostname!r}, not "
                                 f"{job.hostname!r}: it did not boot with this order's config "
                                 "drive")
        if result.keys_missing:
            raise ConfigMismatch(f"{result.keys_missing} of the order's SSH keys are not in "
                                 "root's authorized_keys on the installed system")
    return StepResult(Outcome.ADVANCE, ip_address=result.ip_address)


HOSTNAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # one label (RFC 1123)


class ConfigMismatch(RuntimeError):
    """The installed system's agent reports other settings than the order's."""

    retryable = False


def verify(p: Platform, job: StepInput) -> StepResult:
    if job.acceptance is None:
        return StepResult(Outcome.ADVANCE,
                          note=phrase("no acceptance marks for this node's offer"))
    report = _agent(p, job).verify(_ref(job), *job.acceptance)
    if isinstance(report, Pending):
        return StepResult(Outcome.WAIT)
    facts = {"simulated": phrase(" (simulated)") if report.simulated else "",
             "checks": len(report.checks), "failed": len(report.failures)}
    return StepResult(Outcome.ADVANCE, report=report, note=phrase(
        "acceptance passed{simulated}: {checks} checks, {failed} failed", **facts)
        if report.passed else phrase(
        "acceptance FAILED{simulated}: {checks} checks, {failed} failed", **facts))


def burn_in(p: Platform, job: StepInput) -> StepResult:
    """After a repair only (the job carries the offer's marks then): the acceptance suite,
    burn-in included, from the cleaning ramdisk."""
    if job.acceptance is None:
        return StepResult(Outcome.ADVANCE)
    return verify(p, job)


def detach_media(p: Platform, job: StepInput) -> StepResult:
    _bmc(p, job).eject_media()
    return StepResult(Outcome.ADVANCE)


def attach_agent_media(p: Platform, job: StepInput) -> StepResult:
    # The cleaning ramdisk, booted like the image; its config drive (when the real agent
    # runs) carries the ramdisk agent's enrollment token. An image deploy's node is
    # cleaned by the deploy ramdisk, whose plan is the erase.
    if job.deploy == "image":
        return _boot_ramdisk(p, job, "erase")
    return _boot_from(p, job, job.agent_media_url)


def clean_wait_agent(p: Platform, job: StepInput) -> StepResult:
    if job.deploy == "image":  # the deploy ramdisk erases unasked: wait for its report
        found = ramdisk_boots.report_of(p, job.node_id, "erase") is not None
        return StepResult(Outcome.ADVANCE if found else Outcome.WAIT)
    return wait_agent(p, job)


def _ramdisk_erase(p: Platform, job: StepInput) -> StepResult:
    reported = ramdisk_boots.report_of(p, job.node_id, "erase")
    if reported is None:
        return StepResult(Outcome.WAIT)
    certificates = ramdisk_boots.erase_certificates(reported, job.node_name, job.instance_id)
    if not certificates:
        raise RamdiskFailed(f"the ramdisk's erase report names no disk: {reported.fields}")
    if reported.fields.get("ok") != "1" and all(c["passed"] for c in certificates):
        raise RamdiskFailed("the ramdisk's erase report says it failed, yet every disk read "
                            f"back clean: {reported.fields}")  # a failed disk fails below
    return StepResult(Outcome.ADVANCE, certificates=tuple(certificates), note=phrase(
        "erased {devices} by {method}{simulated}",
        devices=", ".join(c["device"] for c in certificates),
        method=", ".join(sorted({c["method"] for c in certificates})), simulated=""))


def erase(p: Platform, job: StepInput) -> StepResult:
    if job.deploy == "image":
        return _ramdisk_erase(p, job)
    result = _agent(p, job).erase(_ref(job), lease=job.instance_id)
    if isinstance(result, Pending):
        return StepResult(Outcome.WAIT)
    return StepResult(Outcome.ADVANCE, certificates=tuple(result.certificates), note=phrase(
        "erased {devices} by {method}{simulated}",
        devices=", ".join(result.devices) or phrase("no disk"), method=result.method,
        simulated=phrase(" (simulated)") if result.simulated else ""))


def clean_power_off(p: Platform, job: StepInput) -> StepResult:
    if job.polls == 0:  # once, not at every poll of the power
        _bmc(p, job).eject_media()
    return _power(p, job, PowerState.OFF)


STEPS: dict[str, Callable[[Platform, StepInput], StepResult]] = {
    NodeStage.POWER_OFF: power_off,
    NodeStage.ATTACH_MEDIA: attach_media,
    NodeStage.POWER_ON: deploy_power_on,
    NodeStage.WRITE_IMAGE: write_image,
    NodeStage.BOOT_DISK: boot_disk,
    NodeStage.WAIT_AGENT: wait_agent,
    NodeStage.CONFIGURE: configure,
    NodeStage.VERIFY: verify,
    NodeStage.DETACH_MEDIA: detach_media,
    NodeStage.CLEAN_SHUTDOWN: power_off,
    NodeStage.CLEAN_ATTACH_MEDIA: attach_agent_media,
    NodeStage.CLEAN_POWER_ON: power_on,
    NodeStage.CLEAN_WAIT_AGENT: clean_wait_agent,
    NodeStage.ERASE: erase,
    NodeStage.BURN_IN: burn_in,
    NodeStage.CLEAN_POWER_OFF: clean_power_off,
    NodeStage.RETURN_POWER_ON: power_on,
    NodeStage.RETURN_WAIT_AGENT: wait_agent,
    NodeStage.RETURN_VERIFY: verify,
}

"""Image-based deploys: each boot of the deploy ramdisk (lab/ramdisk.py) on a node. The
worker opens a boot with its plan (write this image, or erase every disk) and an ISO whose
kernel command line names the boot's address under /media/ramdisk/<id>; the server's BMC
mounts that ISO, the ramdisk fetches its plan there, carries it out and reports there,
then powers off. The id is a random capability, as a config drive's is; the plan and the
report answer the boot network only, and only while the node deploys or cleans. The rows
and ISOs go when the deploy or clean is over.

The report is the server's own word on what it did: a write's read-back hash, an erase's
per-disk verdict. An erase report becomes one certificate per disk."""

from __future__ import annotations

import json
import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.agent.erase import Certificate
from gpulease.db.repositories import share_instance_first
from gpulease.db.tables import Node, RamdiskBoot
from gpulease.domain.errors import Conflict, InvalidInput, NotFound
from gpulease.domain.states import NODE_IN_PIPELINE, NodeStatus
from gpulease.lab import ramdisk
from gpulease.osimage.build import latest
from gpulease.ports.records import Priced, Records
from gpulease.services.catalog.images import find_image
from gpulease.services.fleet.netboot import on_boot_network

DISK = re.compile(r"^(vd[a-z]|sd[a-z]|nvme[0-9]+n[0-9]+)$")
# What a report may carry (lab/ramdisk.py's INIT), each value bounded
REPORT_KEYS = frozenset({"step", "ok", "why", "sha256", "readback", "disk", "write_cs",
                         "uptime_cs", "methods", "results", "samples", "erase_cs", "disks",
                         "tries"})
REPORT_VALUE = re.compile(r"^[A-Za-z0-9_.:,/-]{0,400}$")


class ImageUnavailable(RuntimeError):
    """No image to write: not built into the image store, and no URL with a checksum."""

    retryable = False
    node_fault = False  # the order's image: no other server would do better


class RamdiskFailed(RuntimeError):
    """The ramdisk reported that its plan failed (a wrong checksum, a failed read-back)."""

    retryable = False

    def __init__(self, message: str, node_fault: bool = True) -> None:
        super().__init__(message)
        self.node_fault = node_fault


def image_at_fault(report: dict[str, str]) -> bool:
    """A write that failed because of the image (its checksum), not the server."""
    return report.get("why") == "checksum"


@dataclass(frozen=True)
class ImageSource:
    url: str  # as the server sees it (http://: the ramdisk's busybox wget)
    sha256: str
    size_bytes: int | None  # None: the ramdisk checks the hash as fetched, no read-back


def image_source(s: Session, p: Priced, image_id: str, region: str | None = None
                 ) -> ImageSource:
    """What an image deploy writes: the operator's URL with its SHA-256 (a registered
    image), else the newest build of that image in the image store, served by the control
    plane at <guest_url>/media/images/<image>.raw, or by the image cache of the server's
    site (catalog [[sites]] image_cache_url) where it has one."""
    image = find_image(s, p, image_id)
    if image is not None and image.url and image.checksum:
        if not image.url.startswith("http://"):
            raise ImageUnavailable(f"image {image_id}: the deploy ramdisk fetches http:// "
                                   f"URLs only, not {image.url.split(':', 1)[0]}://")
        return ImageSource(image.url, image.checksum.removeprefix("sha256:"), None)
    built = latest(p.settings.image_store, image_id)
    if built is None:
        raise ImageUnavailable(
            f"image {image_id} is not in the image store {p.settings.image_store}: build it "
            "(`gpulease image build`) or register its URL and SHA-256 (`gpulease image "
            "add`)")
    site = p.catalog.site_entry(region) if region else None
    if site is not None and site.image_cache_url:
        return ImageSource(f"{site.image_cache_url.rstrip('/')}/{image_id}.raw", built.sha256,
                           built.size_bytes)
    return ImageSource(f"{p.settings.guest_url.rstrip('/')}/media/images/{image_id}.raw",
                       built.sha256, built.size_bytes)


def stored_image(p: Records, image_id: str, source: str | None) -> Path:
    """A built image's file, for a ramdisk on the boot network."""
    on_boot_network(p, source)
    built = latest(p.settings.image_store, image_id) if re.fullmatch(
        r"[a-z0-9][a-z0-9.-]{0,99}", image_id) else None
    if built is None:
        raise NotFound("No image {image} in the image store; `gpulease image build` makes "
                       "one.", image=image_id)
    return Path(built.path)


def write_plan(source: ImageSource) -> str:
    lines = ["action=write", f"image_url={source.url}", f"image_sha256={source.sha256}"]
    if source.size_bytes is not None:
        lines.append(f"image_bytes={source.size_bytes}")
    return "\n".join(lines) + "\n"


ERASE_PLAN = "action=erase\n"


def _folder(p: Records) -> Path:
    return p.settings.image_store / "ramdisk"


@dataclass(frozen=True)
class BootAsk:
    node_id: str
    instance_id: str | None
    stage: str
    action: str  # write | erase
    plan: str


def open_boot(p: Records, ask: BootAsk) -> str:
    """The ISO's URL for the BMC: the node's open boot for this stage when there is one
    (a repeated step), else a new one (its ISO built first, outside any transaction)."""
    with p.db.read() as s:
        found = current_boot(s, ask.node_id, ask.action)
        if found is not None and found.booted_in == ask.stage and found.report_json is None \
                and Path(found.iso_path).exists():
            return _iso_url(p, found.id)
    boot_id = secrets.token_urlsafe(32)
    control = f"{p.settings.guest_url.rstrip('/')}/media/ramdisk/{boot_id}"
    iso = ramdisk.build(_folder(p), f"gpulease.control={control}")
    with p.db.write() as s:
        share_instance_first(s, ask.instance_id)
        s.add(RamdiskBoot(id=boot_id, node_id=ask.node_id, instance_id=ask.instance_id,
                          booted_in=ask.stage, action=ask.action, plan=ask.plan,
                          iso_path=str(iso), created_at=p.clock.now()))
    return _iso_url(p, boot_id)


def _iso_url(p: Records, boot_id: str) -> str:
    return f"{p.settings.public_url.rstrip('/')}/media/ramdisk/{boot_id}.iso"


def current_boot(s: Session, node_id: str, action: str) -> RamdiskBoot | None:
    return s.scalars(select(RamdiskBoot).where(
        RamdiskBoot.node_id == node_id, RamdiskBoot.action == action)
        .order_by(RamdiskBoot.created_at.desc()).limit(1)).first()


@dataclass(frozen=True)
class Reported:
    fields: dict[str, str]
    at: datetime  # when the control plane took it


def report_of(p: Records, node_id: str, action: str) -> Reported | None:
    """The report of the node's latest boot for `action`; None until it comes."""
    with p.db.read() as s:
        boot = current_boot(s, node_id, action)
        if boot is None or boot.report_json is None or boot.reported_at is None:
            return None
        return Reported(dict(json.loads(boot.report_json)), boot.reported_at)


def _live(s: Session, boot_id: str) -> tuple[RamdiskBoot, Node]:
    boot = s.get(RamdiskBoot, boot_id)
    node = s.get(Node, boot.node_id) if boot is not None else None
    if boot is None or node is None or NodeStatus(node.status) not in NODE_IN_PIPELINE:
        raise NotFound("No such ramdisk boot; it ends with its server's deploy or clean.")
    return boot, node


def iso_file(p: Records, boot_id: str) -> Path:
    """The ISO a deploying or cleaning server's BMC mounts."""
    with p.db.read() as s:
        boot, _node = _live(s, boot_id)
        path = Path(boot.iso_path)
    if not path.is_file():
        raise NotFound("This ramdisk's ISO is gone; the step that booted it makes another.")
    return path


def plan_text(p: Records, boot_id: str, disks: str, source: str | None) -> str:
    """The boot's plan, once its disks are known: a write goes to the first of them (the
    system disk: the lab's virtio disks list it first; real servers will want a root
    device hint)."""
    on_boot_network(p, source)
    found = [d for d in disks.split(",") if d]
    if not all(DISK.match(d) for d in found) or len(found) > 32:
        raise InvalidInput("disks", "{disks!r} is not a list of disk names (vda,vdb,…).",
                           disks=disks[:100])
    with p.db.write() as s:
        boot, _node = _live(s, boot_id)
        if boot.report_json is not None:
            raise Conflict("This ramdisk boot has reported already; its plan is spent.")
        boot.disks = ",".join(found)
        plan = boot.plan
    if plan.startswith("action=write"):
        if not found:
            return "action=none\n"  # it reports that it saw no disk
        plan += f"disk={sorted(found)[0]}\n"
    return plan


def record_report(p: Records, boot_id: str, fields: dict[str, str], source: str | None
                  ) -> None:
    on_boot_network(p, source)
    unknown = sorted(set(fields) - REPORT_KEYS)
    bad = sorted(k for k, v in fields.items() if not REPORT_VALUE.match(v))
    if unknown or bad or fields.get("ok") not in ("0", "1") or "step" not in fields:
        raise InvalidInput("report", "A ramdisk report has step=, ok=0|1 and known fields of "
                                     "letters, digits and .:,/-_ only; unknown: {unknown}, "
                                     "malformed: {bad}.",
                           unknown=", ".join(unknown) or "none", bad=", ".join(bad) or "none")
    with p.db.write() as s:
        boot, _node = _live(s, boot_id)
        if boot.report_json is not None:
            raise Conflict("This ramdisk boot has reported already.")
        boot.report_json = json.dumps(fields, sort_keys=True)
        boot.reported_at = p.clock.now()
    p.wake()


def drop_boots(s: Session, node_id: str) -> None:
    """The deploy or clean is over: its ramdisk boots and their ISOs go."""
    for boot in s.scalars(select(RamdiskBoot).where(RamdiskBoot.node_id == node_id)):
        Path(boot.iso_path).unlink(missing_ok=True)
        s.delete(boot)


def write_failure(report: dict[str, str]) -> str | None:
    """Why a write report failed, in words; None when it succeeded."""
    if report.get("ok") == "1" and report.get("step") == "write":
        return None
    why = report.get("why", "")
    tries = report.get("tries", "")
    after = f" (after {tries} tries)" if tries not in ("", "1") else ""
    return {
        "checksum": "the image's SHA-256 did not match (got {got}): nothing was written; "
                    "rebuild or re-register the image".format(got=report.get("sha256") or
                                                              "nothing: the download failed"),
        "incomplete-plan": "the ramdisk found no disk to write, or its plan lacked the "
                           "image's URL or checksum",
        "download-or-write-failed": f"the image could not be streamed onto the disk{after}",
    }.get(why, "the image read back from the disk did not match its SHA-256 "
               f"({report.get('sha256', '?')}){after}" if report.get("step") == "write"
          else f"the ramdisk reported {report.get('step', '?')} instead of a write")


def erase_certificates(reported: Reported, node: str, lease: str | None
                       ) -> list[dict[str, Any]]:
    """One certificate per disk of an erase report (`results`: disk:method:verdict:MiB),
    ended when the report came, started the erase's own time (`erase_cs`) before."""
    report, ended = reported.fields, reported.at
    started = ended - timedelta(seconds=int(report.get("erase_cs", "0") or 0) / 100)
    certificates = []
    for entry in (e for e in report.get("results", "").split(",") if e):
        disk, method, good, size_mib = (entry.split(":") + ["", "", "", "0"])[:4]
        if not DISK.match(disk):
            continue
        certificates.append(Certificate(
            id=uuid.uuid4().hex, device=f"/dev/{disk}", make=None, model=None, serial=None,
            size_bytes=int(size_mib or 0) * 2**20,
            method="blkdiscard" if method == "discard" else "overwrite (zeros)",
            nist_level="Clear", tool="gpulease deploy ramdisk (busybox blkdiscard / dd)",
            verification={"samples": int(report.get("samples", "0") or 0),
                          "expectation": "zeros: the first 16 MiB and 1 MiB at 32 places "
                                         "spread over the disk",
                          "passed": good == "1"},
            passed=good == "1", started_at=started.isoformat(),
            ended_at=ended.isoformat(), node=node, lease=lease).seal().as_dict())
    return certificates

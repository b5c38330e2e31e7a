"""A lab: its folder holds `lab.json` (what was made: servers, ports, the BMC's login, the
accelerator), the pool's disk files and the emulator's config and log. `up` makes the
servers (powered off) and starts their BMC; `down` removes exactly what `up` made."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpulease.lab import bmc, machines
from gpulease.lab.accel import Accel, detect
from gpulease.lab.kernel import KernelUnavailable, lab_kernel
from gpulease.schemas import EnrollRequest

GUEST_HOST = "10.0.2.2"  # the host's loopback, seen from QEMU's user-mode network
CATALOG_FRAGMENT = Path(__file__).resolve().parent.parent / "data" / "lab-catalog.toml"
LAB_OFFER = "lab-vm-x1@lab"


@dataclass
class Plan:
    """What `up` makes: how many servers, the BMC's loopback port, the first SSH port."""

    servers: int = 1
    bmc_port: int = 8100
    first_ssh_port: int = 2201
    media_port: int = 8101  # the lab's media server while it deploys (lab/media.py)
    name: str = "gpulease-lab"
    accel: str | None = None  # "kvm" or "tcg" forces it (GPULEASE_LAB_ACCEL)


@dataclass
class Lab:
    name: str
    folder: str
    accel: str
    accel_why: str
    bmc_port: int
    username: str
    password: str
    emulator_pid: int | None
    servers: list[dict[str, object]] = field(default_factory=list)
    media_port: int = 8101

    def media_port_of(self, name: str) -> int:
        """Each server's deploy has its own media server: the lab's media port, the next
        for the second server, and so on (deploys run side by side)."""
        return self.media_port + [s["name"] for s in self.servers].index(name)

    def server(self, name: str) -> dict[str, object]:
        for s in self.servers:
            if s["name"] == name:
                return s
        raise KeyError(f"no server {name!r} in lab {self.name} (it has "
                       + ", ".join(str(s["name"]) for s in self.servers) + ")")

    @property
    def bmc_url(self) -> str:
        return f"http://127.0.0.1:{self.bmc_port}"

    def system_url(self, server: dict[str, object]) -> str:
        return f"{self.bmc_url}/redfish/v1/Systems/{server['uuid']}"


def _state(folder: Path) -> Path:
    return folder / "lab.json"


def load(folder: Path) -> Lab | None:
    try:
        return Lab(**json.loads(_state(folder).read_text()))
    except FileNotFoundError:
        return None


def _save(folder: Path, lab: Lab) -> None:
    path = _state(folder)
    path.write_text(json.dumps(asdict(lab), indent=2))
    os.chmod(path, 0o600)  # it holds the BMC's password


def accelerator(folder: Path, forced: str | None) -> Accel:
    try:
        kernel = lab_kernel(folder / "cache")
    except KernelUnavailable:
        kernel = None
    return detect(kernel, forced)


def up(folder: Path, plan: Plan) -> Lab:
    """Makes (or finds again) the lab in `folder` and starts its BMC."""
    machines.quiet_libvirt()
    folder = folder.resolve()
    if not folder.exists():
        folder.mkdir(parents=True)
        folder.chmod(0o711)  # QEMU (libvirt's user) passes through; only root lists it
    known = load(folder)
    if known is not None:
        bmc.stop(known.emulator_pid)
    accel = accelerator(folder, plan.accel)
    servers = machines.make(plan.name, folder / "pool", plan.servers, plan.first_ssh_port,
                            accel.domain_type)
    lab = Lab(name=plan.name, folder=str(folder), accel=accel.kind, accel_why=accel.why,
              bmc_port=plan.bmc_port,
              username=known.username if known else "lab",
              password=known.password if known else secrets.token_urlsafe(16),
              emulator_pid=None, servers=[asdict(s) for s in servers],
              media_port=plan.media_port)
    _save(folder, lab)  # before the BMC starts: `down` finds the servers whatever happens
    lab.emulator_pid = bmc.start(folder / "bmc", plan.name, plan.bmc_port,
                                 [s.uuid for s in servers], (lab.username, lab.password))
    _save(folder, lab)
    return lab


def down(folder: Path) -> list[str]:
    """Stops the BMC, removes the lab's servers, disks and pool, and its state; returns the
    servers removed."""
    machines.quiet_libvirt()
    folder = folder.resolve()
    lab = load(folder)
    if lab is None:
        return []
    bmc.stop(lab.emulator_pid)
    removed = machines.remove(lab.name)
    _state(folder).unlink()
    return removed


def catalog_text(base: str) -> str:
    """The catalog `base` with the lab's region, GPU, SKU, image and offer appended."""
    return base.rstrip("\n") + "\n\n" + CATALOG_FRAGMENT.read_text()


def fabric_id(lab: Lab) -> str | None:
    """The platform's fabric for the lab's fabric network (two servers or more)."""
    return f"{lab.name}-fabric" if len(lab.servers) > 1 else None


def enroll_request(lab: Lab, server: dict[str, object]) -> EnrollRequest:
    """A lab server's enrollment, as any server's: its Redfish system, the lab's offer,
    the real agent, its SSH at the loopback port QEMU forwards to it, and the lab's fabric
    (a cluster of lab servers lands on it)."""
    return EnrollRequest(bmc=lab.system_url(server), username=lab.username,
                         password=lab.password, offer=LAB_OFFER, name=str(server["name"]),
                         ssh_endpoint=f"127.0.0.1:{server['ssh_port']}",
                         fabric=fabric_id(lab))


def guest_url(port: int) -> str:
    """The control plane at `port` on this machine, as the lab's servers reach it (QEMU's
    user-mode network maps 10.0.2.2 onto the host's loopback)."""
    return f"http://{GUEST_HOST}:{port}"

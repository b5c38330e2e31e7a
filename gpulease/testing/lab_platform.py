"""A platform selling the lab's offer, its lab servers enrolled, for the end-to-end tests and
the bench of an order in the lab: a lab (`gpulease lab up`), a platform on SQLite with the
lab's catalog and the image store, its API on a loopback port (the servers reach it at
QEMU's 10.0.2.2), its worker running. What `gpulease up --lab` puts together, in one
process the caller drives."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpulease.compose import make_platform
from gpulease.demo import enroll_lab
from gpulease.domain.catalog import read_catalog_text
from gpulease.lab import lab as labs
from gpulease.platform import Platform
from gpulease.schemas import InstanceView
from gpulease.testing.platforms import make_settings, start_migrated
from gpulease.testing.servers import LiveServer, free_port
from gpulease.worker.runner import Worker


@dataclass(frozen=True)
class LabPlatform:
    p: Platform
    lab: labs.Lab
    live: LiveServer
    enrolled: list[str]


@contextmanager
def lab_platform(folder: Path, work: Path, image_store: Path, budget_s: float,
                 servers: int = 1) -> Iterator[LabPlatform]:
    """`folder`: the lab's (QEMU must reach it: not under a private folder); `work`: the
    platform's database and data; `budget_s`: each stage's timeout."""
    lab = labs.up(folder, labs.Plan(servers=servers, bmc_port=free_port(),
                                    first_ssh_port=free_port(), media_port=free_port(),
                                    name=f"or{uuid.uuid4().hex[:6]}", accel="tcg"))
    try:
        catalog = work / "catalog.toml"
        catalog.write_text(labs.catalog_text(read_catalog_text(None)))
        url = f"sqlite:///{work / 'lab.db'}"
        start_migrated(url)
        p = make_platform(make_settings(
            url, work / "data", catalog_file=catalog, image_store=image_store,
            stage_timeout_s=budget_s, poll_interval_s=1.0, lock_ttl_s=60.0,
            bmc_timeout_s=60.0))
        p.db.migrate()
        try:
            with LiveServer(p) as live:
                p.settings.public_url = live.url  # the BMC fetches the ramdisk, the drive
                p.settings.guest_url = labs.guest_url(live.port)  # the servers call in
                enrolled = enroll_lab(p, lab)
                worker = Worker(p)
                worker.start(threads=2)
                try:
                    yield LabPlatform(p, lab, live, enrolled)
                finally:
                    worker.stop()
        finally:
            p.close()
    finally:
        labs.down(folder)


def wait_for(read: Callable[[], InstanceView], done: Callable[[InstanceView], object],
             budget_s: float) -> InstanceView:
    """`read()` every 5 s until `done` says so or the budget is spent; the last view."""
    deadline = time.monotonic() + budget_s
    while True:  # bounded: budget_s
        view = read()
        if done(view) or time.monotonic() > deadline:
            return view
        time.sleep(5)

"""An order in the lab through the platform, timed stage by stage, printed as JSON.

One QEMU server behind the lab's Redfish BMC, enrolled into a platform (SQLite, its API on
loopback, its worker) that sells the lab's offer: the tenant's order is an image-based
deploy (the deploy ramdisk writes the built image, the server boots from disk with its
config drive, the installed system's agent enrolls and answers configure and verify), then
the release (the ramdisk erases both disks; a certificate per disk). Each node stage's wall
time comes from the instance's history; the server's own time (the write and the erase, on
its clock) from the ramdisk's report. Baseline from the same run: the lab deploying the same
image by itself (bench/vm_deploy.py: no platform, no agent, done when SSH answers), and the
ramdisk booted by a bare QEMU process. Needs libvirtd and a built image.
`python bench/order_deploy.py`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vm_deploy  # noqa: E402  (the lab's own deploy: the baseline)

from gpulease.osimage.build import Built, latest  # noqa: E402
from gpulease.schemas import OrderRequest, StageView  # noqa: E402
from gpulease.services.agents.evidence import instance_certificates  # noqa: E402
from gpulease.services.instances import actions, views  # noqa: E402
from gpulease.services.orders import ordering  # noqa: E402
from gpulease.testing.callers import new_tenant  # noqa: E402
from gpulease.testing.lab_platform import lab_platform, wait_for  # noqa: E402

BUDGET_S = 1800
IMAGES = Path("/var/tmp/gpulease-images")


def stage_times(stages: list[StageView]) -> dict[str, float]:
    """Each node stage's wall time: from its first entry to the next stage's."""
    firsts: list[tuple[str, datetime]] = []
    for entry in stages:
        if entry.node and " " not in entry.stage and entry.stage not in (
                name for name, _ in firsts):
            firsts.append((entry.stage, entry.at))
    return {name: round((after - at).total_seconds(), 1)
            for (name, at), (_, after) in zip(firsts, firsts[1:], strict=False)}


def server_seconds(stages: list[StageView], pattern: str) -> float | None:
    for entry in stages:
        found = re.search(pattern, entry.message or "")
        if found:
            return float(found.group(1))
    return None


def run(image: Built) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="gpulease-bench-order-", dir="/var/tmp"))
    work.chmod(0o711)
    key = work / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    try:
        (work / "platform").mkdir()
        with lab_platform(work / "lab", work / "platform", IMAGES, BUDGET_S) as made:
            p = made.p
            tenant = new_tenant(p)
            started = time.monotonic()
            iid = ordering.place_order(p, tenant.principal, OrderRequest(
                sku="lab-vm-x1", region="lab", ssh_keys=[
                    key.with_suffix(".pub").read_text().strip()]))[0].id
            view = wait_for(lambda: views.show_instance(p, tenant.principal, iid),
                            lambda v: v.status in ("ready", "failed"), BUDGET_S)
            if view.status != "ready":
                raise SystemExit(f"not delivered: {view.status_reason}")
            delivered_s = round(time.monotonic() - started, 1)
            actions.release_instance(p, tenant.principal, iid)
            started = time.monotonic()
            view = wait_for(lambda: views.show_instance(p, tenant.principal, iid),
                            lambda v: v.status in ("released", "failed"), BUDGET_S)
            released_s = round(time.monotonic() - started, 1)
            certificates, _ = instance_certificates(p, tenant.principal, iid)
            write_s = server_seconds(view.stages, r"image written to \w+ in (\d+) s")
        result: dict[str, object] = {
            "bench": "order_deploy", "image": Path(image.path).name,
            "image_mib": round(image.size_bytes / 2**20, 1),
            "order_to_ready_s": delivered_s, "release_to_released_s": released_s,
            "node_stages_s": stage_times(view.stages),
            "server_write_s": write_s,
            "server_write_mib_per_s": round(image.size_bytes / 2**20 / write_s, 1)
            if write_s else None,
            "certificates": [f"{c['device']}: {c['method']}, passed={c['passed']}"
                             for c in certificates],
        }
        result["baseline_lab_deploy_alone"] = vm_deploy.run(image)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    chosen = latest(IMAGES, "debian12-lab")
    if chosen is None:
        sys.exit("no image: run `gpulease image build` first")
    print(json.dumps(run(chosen), indent=2))

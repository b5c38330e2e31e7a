"""The deploy ramdisk for real: built from Debian's kernel and busybox, inserted as virtual
media through the lab's Redfish BMC from a loopback URL, booted once from CD by a QEMU
server, and heard from: its NIC up by DHCP, it reports the disks it sees to the control
plane (the host's loopback, 10.0.2.2 inside QEMU's user-mode network) and powers off."""

from __future__ import annotations

import http.server
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from gpulease.drivers.redfish import RedfishDriver
from gpulease.lab import lab as labs
from gpulease.lab import machines, ramdisk
from gpulease.ports.bmc import BmcEndpoint, BootDevice, MediaSlot
from gpulease.testing.servers import free_port
from tests.fixtures.lab import need_libvirt

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("lab")]

BOOT_BUDGET_S = 300  # TCG on a busy 2-core machine: ~15 s alone, minutes under the suite


class _Files(http.server.ThreadingHTTPServer):
    """What a server fetches (the ISO) and where the ramdisk reports, on 127.0.0.1."""

    def __init__(self, iso: Path, port: int) -> None:
        self.iso = iso
        self.reports: queue.Queue[dict[str, list[str]]] = queue.Queue()
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Files

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        if url.path == "/ramdisk.iso":
            body = self.server.iso.read_bytes()
        elif url.path == "/report":
            self.server.reports.put(parse_qs(url.query))
            body = b"ok"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def cache() -> Path:
    """The kernel and ramdisk cache, kept across runs (built once per inputs' hash)."""
    missing = ramdisk.missing_tools()
    if missing:
        pytest.fail(f"the ramdisk needs {', '.join(missing)}; .ci/run installs them")
    folder = Path(tempfile.gettempdir()) / "gpulease-lab-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def folder() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="gpulease-lab-test-", dir="/var/tmp"))
    made.chmod(0o711)
    yield made / "lab"
    shutil.rmtree(made, ignore_errors=True)


def test_a_lab_server_boots_the_deploy_ramdisk_from_virtual_media_and_reports(
        cache: Path, folder: Path) -> None:
    need_libvirt()
    files_port = free_port()
    iso = ramdisk.build(cache, f"gpulease.report=http://10.0.2.2:{files_port}/report")
    files = _Files(iso, files_port)
    threading.Thread(target=files.serve_forever, daemon=True).start()
    name = f"rd{uuid.uuid4().hex[:6]}"
    lab = labs.up(folder, labs.Plan(servers=1, bmc_port=free_port(),
                                    first_ssh_port=free_port(), name=name, accel="tcg"))
    try:
        server = lab.servers[0]
        bmc = RedfishDriver(timeout_s=60).bmc(BmcEndpoint(
            str(server["name"]), lab.system_url(server), lab.username, lab.password))
        started = time.monotonic()
        bmc.insert_media(f"http://127.0.0.1:{files_port}/ramdisk.iso", MediaSlot.CD)
        assert bmc.inserted_media(MediaSlot.CD)
        bmc.set_one_time_boot(BootDevice.VIRTUAL_CD)
        bmc.power_on()
        report = files.reports.get(timeout=BOOT_BUDGET_S)
        booted_s = time.monotonic() - started
        # the server's own two disks (its CD-ROM is not a block device the ramdisk lists)
        assert report["disks"][0].split(",")[:2] == ["vda", "vdb"], report
        deadline = time.monotonic() + 120
        while machines.power_state(str(server["name"])) != "Off":
            assert time.monotonic() < deadline, "the ramdisk did not power the server off"
            time.sleep(1)
        print(f"ramdisk booted and reported in {booted_s:.1f} s")
    finally:
        files.shutdown()
        files.server_close()
        labs.down(folder)

"""The README's path: `gpulease up` in a subprocess, then the CLI against it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gpulease.testing.callers import ssh_key
from gpulease.testing.servers import free_port
from tests.e2e.up import Up, cli

pytestmark = pytest.mark.slow


def test_up_prints_where_it_listens_and_writes_tokens(up: Up) -> None:
    assert (up.data_dir / "operator.token").read_text().startswith("glp_")
    assert (up.data_dir / "demo-tenant.token").read_text().startswith("glp_")
    assert (up.data_dir / "gpulease.db").exists()
    assert oct((up.data_dir / "operator.token").stat().st_mode)[-3:] == "600"
    # The web console's demo login: the demo tenant admin's e-mail and password.
    login = up.data_dir / "demo-console-login.txt"
    assert oct(login.stat().st_mode)[-3:] == "600"
    email, password = login.read_text().split()
    signed_in = httpx.post(f"{up.url}/console/login", data={"email": email, "password": password})
    assert signed_in.status_code == 303 and "gpulease_session" in signed_in.cookies
    assert httpx.get(up.url).headers["location"] == "/console/"
    # and the demo operator's, for the fleet, tenants, tickets, invoices and prices
    email, password = (up.data_dir / "demo-operator-login.txt").read_text().split()
    ops = httpx.post(f"{up.url}/console/login", data={"email": email, "password": password})
    assert ops.status_code == 303
    tenants = httpx.get(f"{up.url}/console/tenants", cookies=ops.cookies)
    assert tenants.status_code == 200 and "demo-" in tenants.text


def test_the_tenant_journey_through_the_cli(up: Up, tmp_path: Path) -> None:
    key_file = tmp_path / "id.pub"
    key_file.write_text(ssh_key() + "\n")

    catalog = json.loads(cli(up, "catalog", "--json").stdout)
    assert {o["id"] for o in catalog["offers"]} >= {"h100-80g-x8@ningxia-1",
                                                   "ascend910b-64g-x8@huawei-zone"}
    assert catalog["container_offers"][0]["price_per_gpu_hour"] == "1.96"
    table = cli(up, "catalog").stdout
    assert "84,480.00" in table and "宁夏一区" in table and "advertised: NVLink + IB" in table
    assert "P1 15 min / 4 h / 72 h; P2 60 min / 24 h / 168 h; P3 480 min / - / 336 h" in (
        " ".join(table.split()))  # the support clocks, before buying
    assert "ubuntu22.04-cann8-mindspore2.4" in cli(up, "images").stdout

    unasked = cli(up, "order", "bare-metal", "--sku", "h100-80g-x8", "--region",
                  "ningxia-1", "--ssh-key", str(key_file))  # no terminal to ask at
    assert unasked.returncode == 2 and "¥84,480.00 from your wallet" in unasked.stderr
    assert "add --yes to go ahead" in unasked.stderr
    assert json.loads(cli(up, "instances", "--json").stdout) == []  # nothing was spent
    human = cli(up, "order", "bare-metal", "--sku", "h100-80g-x8", "--region", "ningxia-1",
                "--ssh-key", str(key_file), "--yes")
    assert human.returncode == 0, human.stderr
    for line in ("held ¥84,480.00 from your wallet", "powering the server off, 1 of 7",
                 "installing the OS, 4 of 7", "ready in", "SSH:      ssh root@",
                 "password: "):  # each step said, not its code
        assert line in human.stdout, human.stdout

    done = cli(up, "order", "bare-metal", "--sku", "h100-80g-x8", "--region", "ningxia-1",
               "--ssh-key", str(key_file), "--wait", "--json", "--yes")
    inst = json.loads(done.stdout)
    assert inst["status"] == "ready" and inst["credentials"]["root_password"]

    refused = cli(up, "order", "cluster", "--nodes", "4", "--sku", "h100-80g-x8", "--region",
                  "ningxia-1", "--ssh-key", str(key_file), "--yes")
    assert refused.returncode == 1 and "Need 4 free h100-80g-x8 nodes" in refused.stderr

    bad = cli(up, "order", "bare-metal", "--sku", "h100-80g-x8", "--region", "mars",
              "--ssh-key", str(key_file))
    assert bad.returncode == 1 and "accepted: ningxia-1" in bad.stderr

    listed = json.loads(cli(up, "instances", "--json").stdout)
    assert len(listed) == 2 and all(i["status"] == "ready" for i in listed)
    shown = json.loads(cli(up, "show", inst["id"], "--json").stdout)
    assert shown["id"] == inst["id"] and shown["credentials_available"] is False

    rebooted = cli(up, "power", inst["id"], "reboot")  # waits until the BMC took it
    assert rebooted.returncode == 0 and ": done — reboot: GracefulRestart accepted by " in (
        rebooted.stdout), rebooted.stdout + rebooted.stderr
    wrong = cli(up, "power", inst["id"], "restart")
    assert wrong.returncode == 1 and "is bare metal: `reboot`" in wrong.stderr

    released = cli(up, "release", inst["id"], "--wait", "--json")
    assert json.loads(released.stdout)["status"] == "released"

    nodes = json.loads(cli(up, "nodes", "--json", token="operator.token").stdout)
    assert len(nodes) == 32 and all(n["simulated"] for n in nodes)
    assert cli(up, "nodes", "--json").returncode == 1  # a tenant is not an operator
    name = next(n["name"] for n in nodes if n["status"] == "available")
    drained = cli(up, "node", "drain", name, "--json", token="operator.token")
    assert json.loads(drained.stdout)["status"] == "maintenance"
    resumed = cli(up, "node", "resume", name, "--json", token="operator.token")
    assert json.loads(resumed.stdout)["status"] == "available"

    added = cli(up, "image", "add", "--id", "ubuntu24.04-cuda12.8", "--name", "Ubuntu 24.04",
                "--os", "Ubuntu 24.04 LTS", "--image-url", "https://images.example.com/u.iso",
                "--checksum", "sha256:" + "ab" * 32, token="operator.token")
    assert added.returncode == 0, added.stderr
    listed_images = json.loads(cli(up, "images", "--json").stdout)
    assert "ubuntu24.04-cuda12.8" in {i["id"] for i in listed_images}
    bad = cli(up, "image", "add", "--id", "x1", "--name", "X", "--os", "X", "--image-url",
              "https://e/x.iso", "--checksum", "md5:1", token="operator.token")
    assert bad.returncode == 2 and "checksum" in bad.stderr
    removed = cli(up, "image", "remove", "ubuntu24.04-cuda12.8", token="operator.token")
    assert removed.returncode == 0, removed.stderr


def test_the_default_demo_runs_behind_a_redfish_emulator(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "gl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease.cli.main", "up", "--data-dir",  # the default: Redfish
         str(data), "--port", str(port), "--emulator-port", str(free_port()),
         "--demo-delay", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # the emulator's power changes land after 1 s: the flows, not the waiting
        env=os.environ | {"GPULEASE_POLL_INTERVAL_S": "0.25", "COLUMNS": "200",
                          "GPULEASE_DEMO_BMC_POWER_DELAY_S": "1"})
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("gpulease up (behind the Redfish emulator) did not start")
        up = Up(data, port, proc)
        key_file = tmp_path / "id.pub"
        key_file.write_text(ssh_key() + "\n")
        done = cli(up, "order", "bare-metal", "--sku", "ascend910b-64g-x8", "--region",
                   "huawei-zone", "--ssh-key", str(key_file), "--wait", "--json", "--yes")
        inst = json.loads(done.stdout)
        assert inst["status"] == "ready", done.stderr
        assert inst["simulated"] is True and inst["credentials"]["root_password"]
        nodes = json.loads(cli(up, "nodes", "--json", token="operator.token").stdout)
        assert {n["bmc_driver"] for n in nodes} == {"redfish"}
        assert all(n["bmc_address"].startswith("http://127.0.0.1:") for n in nodes)
        released = cli(up, "release", inst["id"], "--wait", "--json")
        assert json.loads(released.stdout)["status"] == "released"
        # the embedded S3 server runs with it: the demo tenant's bucket
        stored = json.loads(cli(up, "storage", "--json").stdout)
        assert stored["bucket"].startswith("gl-") and stored["used_bytes"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)  # what a service manager sends
        proc.wait(20)
    assert proc.returncode == 128 + signal.SIGTERM  # stopped through its cleanup
    # the emulator and the S3 server went down with the platform
    with pytest.raises(httpx.TransportError):
        httpx.get(nodes[0]["bmc_address"], timeout=2)
    with pytest.raises(httpx.TransportError):
        httpx.get(stored["endpoint"], timeout=2)


def test_quote_and_funded_demo_wallet_through_the_cli(up: Up) -> None:
    q = cli(up, "quote", "--sku", "h100-80g-x8", "--region", "ningxia-1", "--count", "3",
            "--add", "public-bandwidth=100", "--days-per-week", "1")
    assert q.returncode == 0, q.stderr
    assert "253,440.00" in q.stdout and "7,500.00" in q.stdout and "260,940.00" in q.stdout
    assert "the day term is cheaper" in q.stdout
    data = json.loads(cli(up, "quote", "--sku", "ascend910b-64g-x8", "--region",
                          "huawei-zone", "--count", "3", "--json").stdout)
    assert data["total"] == "46800.00"
    bad = cli(up, "quote", "--sku", "h100-80g-x8", "--region", "ningxia-1", "--add", "gold")
    assert bad.returncode == 2 and "NAME=QUANTITY" in bad.stderr
    wallet = json.loads(cli(up, "wallet", "--json").stdout)
    assert wallet["balance"] == "2000000.00"  # the demo account is funded
    tenant_id = json.loads(cli(up, "ledger", "--json").stdout)[0]
    assert tenant_id["kind"] == "topup"


@pytest.mark.parametrize("taken", ["--port", "--emulator-port"])
def test_up_refuses_a_port_in_use_before_starting_anything(tmp_path: Path, taken: str) -> None:
    # Both ports held for the test (bound with address reuse, as `up` probes them, so no
    # other process is handed one meanwhile); only the taken one listens.
    with socket.socket() as held, socket.socket() as other:
        for sock in (held, other):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
        held.listen()
        port, emulator_port = (int(sock.getsockname()[1]) for sock in
                               ((held, other) if taken == "--port" else (other, held)))
        done = subprocess.run(
            [sys.executable, "-m", "gpulease.cli.main", "up", "--data-dir", str(tmp_path / "gl"),
             "--port", str(port), "--emulator-port", str(emulator_port)],
            capture_output=True, text=True, timeout=60, env=os.environ | {"COLUMNS": "200"})
    assert done.returncode == 1
    assert "is in use" in done.stderr and f"pick another port with {taken}" in done.stderr
    assert not (tmp_path / "gl" / "gpulease.db").exists()  # nothing was started or written

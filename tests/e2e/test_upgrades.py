"""Upgrades and the first operator, as a provider's SRE runs them: a database made by an
earlier release's migrations upgraded by two processes starting at once (one migrates under
the lock, the other finds nothing to do); `migrate --check` and `--current`; a schema newer
than the code refused in one line, and a pending one when starting is not to migrate;
`operator-create` and the first operator from settings; the environment applies where no
option is given, and `config` shows it with secrets masked. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from alembic import command
from cryptography.fernet import Fernet
from sqlalchemy import MetaData, create_engine, insert, text

from gpulease.db.session import alembic_config
from gpulease.testing.platforms import SECRET, database_url
from gpulease.testing.servers import free_port

pytestmark = pytest.mark.slow


def gpulease(args: list[str], env: dict[str, str], wait: bool = True
             ) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    full = os.environ | {"GPULEASE_SECRET_KEY": SECRET, "GPULEASE_DB_WAIT_S": "5"} | env
    cmd = [sys.executable, "-m", "gpulease.cli.main", *args]
    if wait:
        done = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=120)
        # the terminal may wrap a long line: compare words
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                           " ".join(done.stderr.split()))
    return subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def at_revision(url: str, revision: str) -> None:
    """The database as an earlier release left it."""
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()


def revision_of(url: str) -> str:
    engine = create_engine(url)
    with engine.connect() as conn:
        found = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    engine.dispose()
    return str(found)


# The schema the previous release (round 1) left: its last migration.
PREVIOUS_RELEASE = "0011"
WHEN = datetime(2026, 10, 1, 8, 0, tzinfo=UTC)


def seed_previous_release(url: str) -> None:
    """What a provider's database held under the previous release: a tenant with its admin,
    wallet and ledger, an eight-GPU node with its history, and an instance released on it,
    written with that release's columns (reflected from its schema)."""
    engine = create_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    t = meta.tables
    sealed = Fernet(SECRET.encode()).encrypt(b"bmc-password").decode()
    with engine.begin() as conn:
        conn.execute(insert(t["tenants"]).values(id="ten-old", name="old-team",
                                                 created_at=WHEN))
        conn.execute(insert(t["users"]).values(id="usr-old", tenant_id="ten-old",
                                               email="admin@old.example", name="Admin",
                                               role="admin", created_at=WHEN))
        conn.execute(insert(t["wallets"]).values(tenant_id="ten-old", balance=Decimal("1000.00"),
                                                 credit_limit=Decimal("0"), updated_at=WHEN))
        conn.execute(insert(t["ledger_entries"]).values(
            tenant_id="ten-old", at=WHEN, kind="topup", amount=Decimal("1000.00"),
            balance_after=Decimal("1000.00"), reference="bank-1"))
        conn.execute(insert(t["fabrics"]).values(id="ib-ningxia-1-1", region="ningxia-1",
                                                 kind="infiniband", rate_gbps=400))
        conn.execute(insert(t["nodes"]).values(
            id="node-old", name="h100-old-01", sku="h100-80g-x8", region="ningxia-1",
            pool="bare_metal", serial="SN-OLD-01", fabric_id="ib-ningxia-1-1",
            bmc_driver="simulated", bmc_address="simulated://h100-old-01",
            bmc_username="admin", bmc_password_enc=sealed, status="available",
            generation=3, created_at=WHEN, updated_at=WHEN, attempts=0))
        conn.execute(insert(t["gpus"]), [
            {"id": f"gpu-old-{i}", "node_id": "node-old", "index": i,
             "model": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-old-{i}"} for i in range(8)])
        conn.execute(insert(t["instances"]).values(
            id="i-old", tenant_id="ten-old", created_by="usr-old", kind="bare_metal",
            sku="h100-80g-x8", region="ningxia-1", term="day",
            image_id="ubuntu22.04-cuda12.4-pytorch2.5", node_count=1, gpu_count=8,
            ssh_keys="[]", status="released", ordered_at=WHEN, attempts=0))
        conn.execute(insert(t["events"]), [
            {"at": WHEN, "resource": "node", "resource_id": "node-old", "kind": "status",
             "from_value": "cleaning", "to_value": "available", "message": "erased",
             "instance_id": None},
            {"at": WHEN, "resource": "instance", "resource_id": "i-old", "kind": "status",
             "from_value": "releasing", "to_value": "released", "message": None,
             "instance_id": "i-old"}])
    engine.dispose()


def wait_ready(url: str, procs: list[subprocess.Popen[str]],
               timeout_s: float = 60) -> httpx.Response:
    """/readyz once it answers 200; a process that ended before fails with its output."""
    deadline = time.monotonic() + timeout_s
    while True:  # bounded by the deadline
        for proc in procs:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"{proc.args[3:]} ended with {proc.returncode}: {out}{err}")
        try:
            ready = httpx.get(f"{url}/readyz", timeout=2)
            if ready.status_code == 200 or time.monotonic() > deadline:
                return ready
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_processes_upgrade_the_previous_release_at_once(kind: str, tmp_path: Path) -> None:
    """An API process and a worker start at once on the previous release's database with
    its data: one migrates under the lock, the other waits and finds it done; the data is
    read by this release's API as it was written."""
    with database_url(kind, tmp_path) as url:
        at_revision(url, PREVIOUS_RELEASE)
        seed_previous_release(url)
        env = {"GPULEASE_DATABASE_URL": url, "GPULEASE_DATA_DIR": str(tmp_path / "data")}
        pending = gpulease(["migrate", "--check"], env)
        assert pending.returncode == 1 and PREVIOUS_RELEASE in pending.stdout, pending.stdout
        port = free_port()
        serve = gpulease(["serve", "--port", str(port)], env, wait=False)
        worker = gpulease(["worker"], env, wait=False)
        procs = [serve, worker]
        try:
            ready = wait_ready(f"http://127.0.0.1:{port}", procs)  # type: ignore[arg-type]
            assert ready.status_code == 200, ready.text
            head = gpulease(["migrate", "--current"], env)
            latest = head.stdout.split()[-1]
            assert revision_of(url) == latest and f"database: {latest}" in head.stdout
            made = gpulease(["operator-create", "--email", "sre@example.com"], env)
            assert made.returncode == 0, made.stderr
            auth = {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}
            api = f"http://127.0.0.1:{port}/api/v1"
            tenants = httpx.get(f"{api}/tenants", headers=auth).json()["items"]
            assert [(t["name"], t["status"], t["balance"], t["live_instances"])
                    for t in tenants] == [("old-team", "active", "1000.00", 0)]
            node = httpx.get(f"{api}/nodes/h100-old-01", headers=auth).json()
            assert (node["status"], node["serial"], node["gpu_count"], node["fabric"]) == (
                "available", "SN-OLD-01", 8, "ib-ningxia-1-1")
            history = httpx.get(f"{api}/nodes/h100-old-01/history", headers=auth).json()
            assert history["items"][0]["message"] == "erased"
            fabric = httpx.get(f"{api}/fabrics", headers=auth).json()["items"]
            assert fabric[0]["nodes"] == 1 and fabric[0]["rate_gbps"] == 400
            assert httpx.get(f"{api}/catalog", headers=auth).json()["version"] == 1
        finally:
            for proc in procs:
                proc.terminate()  # type: ignore[union-attr]
            outputs = [proc.communicate(timeout=60) for proc in procs]  # type: ignore[union-attr]
        assert all("Traceback" not in err for _, err in outputs), outputs
        assert gpulease(["migrate", "--check"], env).returncode == 0


def test_a_newer_schema_and_a_pending_one_are_refused_in_one_line(tmp_path: Path) -> None:
    with database_url("postgresql", tmp_path) as url:
        env = {"GPULEASE_DATABASE_URL": url}
        at_revision(url, "0026")
        port = str(free_port())
        refused = gpulease(["serve", "--data-dir", str(tmp_path), "--port", port],
                           env | {"GPULEASE_MIGRATE_AT_START": "false"})
        assert refused.returncode == 1 and "run `gpulease migrate`" in refused.stderr
        assert "Traceback" not in refused.stderr and revision_of(url) == "0026"
        engine = create_engine(url)
        with engine.begin() as conn:  # as a newer release would leave it
            conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
        engine.dispose()
        newer = gpulease(["serve", "--data-dir", str(tmp_path), "--port", port], env)
        assert newer.returncode == 1 and "newer than this gpulease" in newer.stderr
        assert "Traceback" not in newer.stderr and revision_of(url) == "0999"
        check = gpulease(["migrate", "--check", "--data-dir", str(tmp_path)], env)
        assert check.returncode == 2


def test_the_first_operator_and_the_environment(tmp_path: Path) -> None:
    data = tmp_path / "from-env"
    env = {"GPULEASE_DATA_DIR": str(data), "GPULEASE_PORT": "8123"}
    shown = gpulease(["config", "--json"], env)
    settings = json.loads(shown.stdout)
    assert settings["GPULEASE_DATA_DIR"] == str(data) and settings["GPULEASE_PORT"] == 8123
    assert settings["GPULEASE_SECRET_KEY"] == "(set)" and SECRET not in shown.stdout
    given = json.loads(gpulease(["config", "--json", "--port", "9000"], env).stdout)
    assert given["GPULEASE_PORT"] == 9000  # the command line wins

    made = gpulease(["operator-create", "--email", "sre@example.com"], env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("gl") and "valid until" in made.stdout
    assert (data / "gpulease.db").exists()  # the data dir came from the environment
    again = gpulease(["operator-create", "--email", "sre@example.com"], env)
    assert again.returncode == 1 and "exists already" in again.stderr

    from cryptography.fernet import Fernet

    other = env | {"GPULEASE_SECRET_KEY": Fernet.generate_key().decode()}
    refused = gpulease(["migrate"], other)
    assert refused.returncode == 1 and "fingerprint" in refused.stderr
    assert "Traceback" not in refused.stderr
    checked = gpulease(["migrate", "--check"], other)  # current, but not with that key
    assert checked.returncode == 3 and "not the one" in checked.stderr
    rotated = gpulease(["key", "rotate"], env)
    assert rotated.returncode == 0, rotated.stderr
    new_key = rotated.stdout.strip().splitlines()[-1]
    assert gpulease(["migrate"], env).returncode == 1  # the old key is refused now
    assert gpulease(["migrate"], env | {"GPULEASE_SECRET_KEY": new_key}).returncode == 0

    fresh = tmp_path / "bootstrap"
    port = free_port()
    serve = gpulease(["serve", "--port", str(port)],
                     {"GPULEASE_DATA_DIR": str(fresh),
                      "GPULEASE_BOOTSTRAP_OPERATOR_EMAIL": "first@example.com"}, wait=False)
    try:
        token_file = fresh / "operator.token"
        for _ in range(200):  # bounded: 20 s
            if token_file.exists() and token_file.read_text().strip():
                break
            import time

            time.sleep(0.1)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        import httpx

        for _ in range(100):
            try:
                me = httpx.get(f"http://127.0.0.1:{port}/api/v1/me", headers={
                    "Authorization": f"Bearer {token_file.read_text().strip()}"}, timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert me.status_code == 200 and me.json()["role"] == "operator"
    finally:
        serve.terminate()  # type: ignore[union-attr]
        serve.communicate(timeout=30)  # type: ignore[union-attr]

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
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from gpulease.db.session import alembic_config
from tests.conftest import SECRET, database_url, free_port

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


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_processes_upgrade_an_old_database_at_once(kind: str, tmp_path: Path) -> None:
    with database_url(kind, tmp_path) as url:
        at_revision(url, "0020")
        env = {"GPULEASE_DATABASE_URL": url}
        pending = gpulease(["migrate", "--check", "--data-dir", str(tmp_path)], env)
        assert pending.returncode == 1 and "0020" in pending.stdout, pending.stdout
        both = [gpulease(["migrate", "--data-dir", str(tmp_path)], env, wait=False)
                for _ in range(2)]
        results = [p.communicate(timeout=120) for p in both]  # type: ignore[union-attr]
        assert [p.returncode for p in both] == [0, 0], results  # type: ignore[union-attr]
        head = gpulease(["migrate", "--current", "--data-dir", str(tmp_path)], env)
        latest = head.stdout.split()[-1]
        assert revision_of(url) == latest and f"database: {latest}" in head.stdout
        assert gpulease(["migrate", "--check", "--data-dir", str(tmp_path)],
                        env).returncode == 0


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

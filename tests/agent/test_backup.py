"""Checkpoint backup and restore against a real S3 server (SeaweedFS, as `gpulease up` runs
it): incremental by content, big files in parts, a run cut short resumes, a restore
verified byte for byte with modes and times, a tampered content or a manifest that points
outside the target refused before anything is put in place, a tenant's scoped key kept to
its bucket, and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from typer.testing import CliRunner

from gpulease.agent import backup as engine
from gpulease.agent.backup import BackupError, Pace, Target, backup, list_snapshots, restore
from gpulease.cli.main import app
from gpulease.domain.snapshots import blob_key, manifest_key
from gpulease.drivers.seaweedfs import EmbeddedS3, start_embedded_s3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    server = start_embedded_s3(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop(grace_s=3)  # its data goes with the test


@pytest.fixture
def target(s3: EmbeddedS3, request: pytest.FixtureRequest) -> Target:
    bucket = "ckpt-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]
    admin(s3).create_bucket(Bucket=bucket)
    return Target(endpoint=s3.url, bucket=bucket, access_key_id=s3.access_key,
                  secret_access_key=s3.secret_key, prefix="backups/node-1")


def admin(s3: EmbeddedS3) -> object:
    return boto3.client("s3", endpoint_url=s3.url, aws_access_key_id=s3.access_key,
                        aws_secret_access_key=s3.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def tree(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file: (sha256, mode, mtime_ns)."""
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                             p.stat().st_mode & 0o7777, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def checkpoints(root: Path) -> Path:
    (root / "step-100").mkdir(parents=True)
    (root / "step-100" / "model.pt").write_bytes(os.urandom(12 << 20))  # in parts
    (root / "step-100" / "optim.pt").write_bytes(os.urandom(300_000))
    (root / "step-100" / "config.json").write_text('{"lr": 3e-4}')
    (root / "step-100" / "config-copy.json").write_text('{"lr": 3e-4}')  # same content
    (root / "run.sh").write_text("#!/bin/sh\ntorchrun train.py\n")
    (root / "run.sh").chmod(0o755)
    (root / "latest").symlink_to("step-100")  # a link is skipped, not followed
    return root


def test_a_backup_sends_each_content_once_and_a_restore_gives_the_same_tree(
    target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "MULTIPART_AT", 8 << 20)
    monkeypatch.setattr(engine, "PART", 5 << 20)
    source = checkpoints(tmp_path / "data")
    cache = tmp_path / "cache.json"
    moved: list[int] = []
    first = backup(source, target, cache=cache, pace=Pace(progress=moved.append))
    assert (first.files, first.contents_uploaded, first.contents_present) == (5, 4, 0)
    assert first.skipped == ["latest"]
    assert first.bytes_uploaded == first.bytes_total - len('{"lr": 3e-4}')
    assert sum(moved) == first.bytes_uploaded  # progress counts every byte sent

    again = backup(source, target, cache=cache)
    assert (again.bytes_uploaded, again.contents_present) == (0, 4)
    assert again.snapshot_id != first.snapshot_id
    (source / "step-100" / "optim.pt").write_bytes(os.urandom(300_000))
    third = backup(source, target, cache=cache)
    assert (third.contents_uploaded, third.bytes_uploaded) == (1, 300_000)
    listed = [s["id"] for s in list_snapshots(target)]
    assert listed == sorted([first.snapshot_id, again.snapshot_id, third.snapshot_id],
                            reverse=True)

    dest = tmp_path / "restored"
    done = restore(target, third.snapshot_id, dest)
    assert (done.files, done.bytes_total) == (5, third.bytes_total)
    wanted = tree(source)
    assert tree(dest) == wanted  # contents, modes and times
    assert not (dest / "latest").exists() and not (dest / ".gpulease-restore").exists()
    old = restore(target, first.snapshot_id, tmp_path / "older")
    assert old.files == 5 and tree(tmp_path / "older")["step-100/optim.pt"] != (
        wanted["step-100/optim.pt"])


def test_a_run_cut_short_resumes_and_bad_snapshots_are_refused_before_any_file_moves(
    target: Target, s3: EmbeddedS3, tmp_path: Path
) -> None:
    source = checkpoints(tmp_path / "data")
    s = admin(s3)
    model = (source / "step-100" / "model.pt").read_bytes()
    sha = hashlib.sha256(model).hexdigest()
    # an earlier run sent the big file, then stopped before its manifest
    s.put_object(Bucket=target.bucket, Key=blob_key("backups/node-1/", sha),  # type: ignore[attr-defined]
                 Body=model)
    resumed = backup(source, target, cache=None)
    assert resumed.contents_present == 1 and resumed.bytes_uploaded == (
        resumed.bytes_total - len(model) - len('{"lr": 3e-4}'))

    # a content altered in the bucket: the restore refuses and places nothing
    optim = hashlib.sha256((source / "step-100" / "optim.pt").read_bytes()).hexdigest()
    s.put_object(Bucket=target.bucket, Key=blob_key("backups/node-1/", optim),  # type: ignore[attr-defined]
                 Body=b"x" * 300_000)
    dest = tmp_path / "restored"
    with pytest.raises(BackupError, match="does not match its checksum"):
        restore(target, resumed.snapshot_id, dest)
    assert [p.name for p in dest.iterdir()] == []

    # a content gone from the bucket: the download fails, and no staging folder is left;
    # one a killed run left behind is removed by the next
    (dest / ".gpulease-restore").mkdir()
    (dest / ".gpulease-restore" / "half-fetched").write_bytes(b"x" * 10)
    s.delete_object(Bucket=target.bucket, Key=blob_key("backups/node-1/", optim))  # type: ignore[attr-defined]
    with pytest.raises(BackupError, match="could not be read"):
        restore(target, resumed.snapshot_id, dest)
    assert [p.name for p in dest.iterdir()] == []

    # a manifest written by anyone with the keys cannot reach outside the target
    key = manifest_key("backups/node-1/", resumed.snapshot_id)
    manifest = json.loads(s.get_object(Bucket=target.bucket, Key=key)["Body"].read())  # type: ignore[attr-defined]
    manifest["files"][0]["path"] = "../../etc/cron.d/evil"
    s.put_object(Bucket=target.bucket, Key=key, Body=json.dumps(manifest).encode())  # type: ignore[attr-defined]
    with pytest.raises(BackupError, match="not valid"):
        restore(target, resumed.snapshot_id, tmp_path / "elsewhere")
    assert not (tmp_path / "etc").exists()
    with pytest.raises(BackupError, match="refused"):
        restore(target, "20261201T000000Z-000000", tmp_path / "none")


def test_the_cli_backs_up_lists_and_restores_with_keys_from_the_environment(
    target: Target, tmp_path: Path
) -> None:
    source = checkpoints(tmp_path / "data")
    env = {"AWS_ACCESS_KEY_ID": target.access_key_id,
           "AWS_SECRET_ACCESS_KEY": target.secret_access_key,
           "GPULEASE_S3_ENDPOINT": target.endpoint, "GPULEASE_S3_BUCKET": target.bucket,
           "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    runner = CliRunner()
    made = runner.invoke(app, ["agent", "backup", str(source), "--prefix", "ck", "--json"],
                         env=env)
    assert made.exit_code == 0, made.output
    result = json.loads(made.output)
    assert result["files"] == 5 and list((tmp_path / "xdg" / "gpulease").iterdir())
    listed = runner.invoke(app, ["agent", "snapshots", "--prefix", "ck"], env=env)
    assert listed.exit_code == 0 and result["snapshot_id"] in listed.output
    back = runner.invoke(app, ["agent", "restore", result["snapshot_id"],
                               str(tmp_path / "back"), "--prefix", "ck"], env=env)
    assert back.exit_code == 0 and "verified" in back.output, back.output
    assert tree(tmp_path / "back") == tree(source)
    nokeys = runner.invoke(app, ["agent", "backup", str(source)],
                           env={**env, "AWS_ACCESS_KEY_ID": ""})
    assert nokeys.exit_code == 2 and "AWS_ACCESS_KEY_ID" in nokeys.output
    wrong = runner.invoke(app, ["agent", "backup", str(source), "--bucket", "not-mine"],
                          env=env)
    assert wrong.exit_code == 1 and "no bucket not-mine" in wrong.output

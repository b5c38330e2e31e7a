"""Object storage against a real S3 server (SeaweedFS, as `gpulease up` runs it): a bucket
per tenant, access keys scoped to it and refused on another tenant's bucket by the server
itself, a secret shown once, a revoked key refused. SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from gpulease.agent.backup import BackupError, Target, backup, list_snapshots
from gpulease.cli.main import app
from gpulease.domain.accounts import Role
from gpulease.domain.errors import Conflict, Forbidden
from gpulease.domain.snapshots import blob_key, manifest_key
from gpulease.drivers.seaweedfs import EmbeddedS3, start_embedded_s3
from gpulease.platform import Platform
from gpulease.services import accounts, storage
from tests.conftest import LiveServer, new_tenant


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    server = start_embedded_s3(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


def client(s3: EmbeddedS3, key_id: str, secret: str) -> object:
    return boto3.client("s3", endpoint_url=s3.url, aws_access_key_id=key_id,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def refused(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return "allowed"


def test_each_tenant_reaches_its_own_bucket_only(platform: Platform, s3: EmbeddedS3,
                                                 tmp_path: Path) -> None:
    alpha, beta = new_tenant(platform, "alpha"), new_tenant(platform, "beta")
    with pytest.raises(Conflict, match="GPULEASE_S3_ENDPOINT"):
        storage.show(platform, alpha.principal)
    platform.settings.s3_endpoint = s3.url
    platform.settings.s3_access_key, platform.settings.s3_secret_key = (s3.access_key,
                                                                        s3.secret_key)
    first = storage.show(platform, alpha.principal)
    assert first.bucket == f"gl-{alpha.tenant_id}" and first.used_bytes == 0
    assert first.keys == []
    a_key = storage.new_key(platform, alpha.principal)
    b_key = storage.new_key(platform, beta.principal)
    a = client(s3, a_key.access_key_id, a_key.secret_access_key)
    b = client(s3, b_key.access_key_id, b_key.secret_access_key)
    a.put_object(Bucket=a_key.bucket, Key="ckpt/step-100.pt",  # type: ignore[attr-defined]
                 Body=b"w" * 4096)
    b.put_object(Bucket=b_key.bucket, Key="data.bin", Body=b"b")  # type: ignore[attr-defined]
    # the server itself refuses a key on another tenant's bucket
    assert refused(lambda: a.get_object(  # type: ignore[attr-defined]
        Bucket=b_key.bucket, Key="data.bin")) == "AccessDenied"
    assert refused(lambda: a.list_objects_v2(  # type: ignore[attr-defined]
        Bucket=b_key.bucket)) == "AccessDenied"
    assert refused(lambda: a.put_object(  # type: ignore[attr-defined]
        Bucket=b_key.bucket, Key="x", Body=b"x")) == "AccessDenied"
    assert refused(lambda: b.delete_object(  # type: ignore[attr-defined]
        Bucket=a_key.bucket, Key="ckpt/step-100.pt")) == "AccessDenied"

    # the agent's checkpoint backup with a tenant's key: its bucket yes, another's no
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "step-1.pt").write_bytes(b"c" * 1000)
    mine = Target(endpoint=s3.url, bucket=a_key.bucket, access_key_id=a_key.access_key_id,
                  secret_access_key=a_key.secret_access_key, prefix="backups/n1")
    made = backup(tmp_path / "ckpt", mine)
    assert made.files == 1 and list_snapshots(mine)[0]["id"] == made.snapshot_id
    with pytest.raises(BackupError, match="refused"):
        backup(tmp_path / "ckpt", replace(mine, bucket=b_key.bucket))
    admin = client(s3, s3.access_key, s3.secret_key)
    admin.delete_object(Bucket=a_key.bucket,  # type: ignore[attr-defined]
                        Key=manifest_key("backups/n1/", made.snapshot_id))
    admin.delete_object(Bucket=a_key.bucket,  # type: ignore[attr-defined]
                        Key=blob_key("backups/n1/", hashlib.sha256(b"c" * 1000).hexdigest()))

    seen = storage.show(platform, alpha.principal)
    assert seen.used_bytes == 4096
    assert [k.access_key_id for k in seen.keys] == [a_key.access_key_id]
    assert a_key.secret_access_key not in seen.model_dump_json()  # shown once only
    member = accounts.add_user(platform, alpha.principal, "m@alpha.example", "M",
                               Role.MEMBER, None)
    with pytest.raises(Forbidden):
        storage.new_key(platform, accounts.authenticate(platform, accounts.issue_token(
            platform, alpha.principal, "m", member.id, 1).token or ""))

    with LiveServer(platform) as server:
        env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": alpha.token}
        r = CliRunner().invoke(app, ["storage"], env=env)
        assert r.exit_code == 0 and f"gl-{alpha.tenant_id}" in r.output, r.output
        r = CliRunner().invoke(app, ["storage", "key"], env=env)
        assert r.exit_code == 0 and "AWS_SECRET_ACCESS_KEY=" in r.output
        r = CliRunner().invoke(app, ["storage", "revoke", a_key.access_key_id], env=env)
        assert r.exit_code == 0 and "revoked" in r.output
    deadline = time.monotonic() + 10
    outcome = "allowed"
    while time.monotonic() < deadline:  # the store applies the revocation
        outcome = refused(lambda: a.list_objects_v2(  # type: ignore[attr-defined]
            Bucket=a_key.bucket))
        if outcome != "allowed":
            break
        time.sleep(0.2)
    assert outcome in ("InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch")

"""Object storage against a real S3 server (SeaweedFS, as `gpulease up` runs it): a bucket
per tenant, access keys scoped to it and refused on another tenant's bucket by the server
itself, a secret shown once, a revoked key refused, no key able to set a bucket policy (one
left from before removed at the next check). SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from gpulease.agent.backup import BackupError, Target, backup, list_snapshots
from gpulease.cli.main import app
from gpulease.domain.accounts import Role
from gpulease.domain.errors import Conflict, Forbidden
from gpulease.domain.snapshots import blob_key, manifest_key
from gpulease.drivers.seaweedfs import EmbeddedS3
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.storage import buckets as storage
from gpulease.testing.callers import new_tenant
from gpulease.testing.servers import LiveServer
from tests.fixtures.storage import client


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
    member = accounts.add_user(platform, alpha.principal, accounts.Person("m@alpha.example", "M",
                                                                          Role.MEMBER, None))
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


def test_past_its_quota_the_store_refuses_the_tenants_writes_until_it_is_under_again(
        platform: Platform, s3: EmbeddedS3) -> None:
    """The quota is enforced by the S3 server, whatever client writes: past it, the
    tenant's keys read, list and delete but the upload is refused; a key made meanwhile is
    refused too; the platform's own run key still writes (a lapsed lease's last backup),
    under the run's prefix only, until the run ends;
    deleting below the quota, or the operator raising it, opens writes again."""
    from gpulease.services.storage import quota as storage_quota

    platform.settings.s3_endpoint = s3.url
    platform.settings.s3_access_key, platform.settings.s3_secret_key = (s3.access_key,
                                                                        s3.secret_key)
    platform.settings.storage_quota_check_s = 0.001  # measure at each check
    t = new_tenant(platform)
    ops = accounts.authenticate(platform, accounts.create_operator(
        platform, f"ops-{t.tenant_id}@example.com", "Ops")[1].token)
    storage.show(platform, t.principal)
    storage_quota.set_quota(platform, ops, t.tenant_id, 10_000 / 1e9)  # 10 kB
    key = storage.new_key(platform, t.principal)
    c = client(s3, key.access_key_id, key.secret_access_key)
    c.put_object(Bucket=key.bucket, Key="a.bin", Body=b"a" * 6000)  # type: ignore[attr-defined]
    c.put_object(Bucket=key.bucket, Key="b.bin", Body=b"b" * 6000)  # type: ignore[attr-defined]
    assert storage_quota.check_quotas(platform) >= 1
    assert storage.show(platform, t.principal).writes_blocked
    assert refused(lambda: c.put_object(  # type: ignore[attr-defined]
        Bucket=key.bucket, Key="c.bin", Body=b"c")) == "AccessDenied"
    assert c.get_object(Bucket=key.bucket, Key="a.bin")[  # type: ignore[attr-defined]
        "Body"].read() == b"a" * 6000
    later = storage.new_key(platform, t.principal)  # a new key is no way around it
    d = client(s3, later.access_key_id, later.secret_access_key)
    assert refused(lambda: d.put_object(  # type: ignore[attr-defined]
        Bucket=key.bucket, Key="d.bin", Body=b"d")) == "AccessDenied"
    # the platform's own run writes (data first), under its prefix only, until it ends
    _, _, run = storage.run_key(platform, t.tenant_id, "bk-last", "backups/i-lapsed")
    r = client(s3, run.access_key_id, run.secret_access_key)
    r.put_object(Bucket=key.bucket, Key="backups/i-lapsed/last.bin",  # type: ignore[attr-defined]
                 Body=b"r")
    assert refused(lambda: r.put_object(  # type: ignore[attr-defined]
        Bucket=key.bucket, Key="elsewhere.bin", Body=b"r")) == "AccessDenied"
    assert refused(lambda: r.put_object(  # type: ignore[attr-defined]
        Bucket=key.bucket, Key="backups/i-other/x.bin", Body=b"r")) == "AccessDenied"
    r.delete_object(Bucket=key.bucket,  # type: ignore[attr-defined]
                    Key="backups/i-lapsed/last.bin")
    assert storage.end_run_key(platform, t.tenant_id, "bk-last", run.access_key_id)
    assert refused(lambda: r.put_object(  # type: ignore[attr-defined]
        Bucket=key.bucket, Key="backups/i-lapsed/late.bin", Body=b"r")) in (
        "InvalidAccessKeyId", "AccessDenied")

    c.delete_object(Bucket=key.bucket, Key="b.bin")  # type: ignore[attr-defined]
    storage_quota.check_quotas(platform)
    assert not storage.show(platform, t.principal).writes_blocked
    c.put_object(Bucket=key.bucket, Key="c.bin", Body=b"c")  # type: ignore[attr-defined]
    c.put_object(Bucket=key.bucket, Key="e.bin", Body=b"e" * 6000)  # type: ignore[attr-defined]
    storage_quota.check_quotas(platform)
    assert storage.show(platform, t.principal).writes_blocked
    storage_quota.set_quota(platform, ops, t.tenant_id, 1.0)  # raised: open at once
    assert not storage.show(platform, t.principal).writes_blocked
    c.put_object(Bucket=key.bucket, Key="f.bin", Body=b"f")  # type: ignore[attr-defined]


def test_a_tenant_cannot_open_its_bucket_with_a_policy_and_one_set_before_is_removed(
        platform: Platform, s3: EmbeddedS3) -> None:
    """A key touches objects only: setting a bucket policy (public, or letting another
    tenant's key in, or outliving the quota's block) is refused by the server. One set
    before this release (when keys had `s3:*`) is removed at the next quota check, and
    the block holds."""
    import json

    from gpulease.services.storage import quota as storage_quota

    platform.settings.s3_endpoint = s3.url
    platform.settings.s3_access_key, platform.settings.s3_secret_key = (s3.access_key,
                                                                        s3.secret_key)
    platform.settings.storage_quota_check_s = 0.001  # measure at each check
    alpha, beta = new_tenant(platform), new_tenant(platform)
    a_key, b_key = storage.new_key(platform, alpha.principal), storage.new_key(
        platform, beta.principal)
    a = client(s3, a_key.access_key_id, a_key.secret_access_key)
    b = client(s3, b_key.access_key_id, b_key.secret_access_key)
    public = json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": ["s3:*"],
        "Resource": [f"arn:aws:s3:::{a_key.bucket}", f"arn:aws:s3:::{a_key.bucket}/*"]}]})
    assert refused(lambda: a.put_bucket_policy(  # type: ignore[attr-defined]
        Bucket=a_key.bucket, Policy=public)) == "AccessDenied"
    a.put_object(Bucket=a_key.bucket, Key="own.bin", Body=b"mine")  # type: ignore[attr-defined]

    # as a key of an older release could: the policy is on the bucket, beta writes in
    admin = client(s3, s3.access_key, s3.secret_key)
    admin.put_bucket_policy(Bucket=a_key.bucket, Policy=public)  # type: ignore[attr-defined]
    b.put_object(Bucket=a_key.bucket, Key="in.bin", Body=b"x")  # type: ignore[attr-defined]
    storage_quota.check_quotas(platform)  # the platform's access set again, the policy gone
    assert refused(lambda: admin.get_bucket_policy(  # type: ignore[attr-defined]
        Bucket=a_key.bucket)) == "NoSuchBucketPolicy"
    assert refused(lambda: b.put_object(  # type: ignore[attr-defined]
        Bucket=a_key.bucket, Key="again.bin", Body=b"x")) == "AccessDenied"
    a.put_object(Bucket=a_key.bucket, Key="still.bin", Body=b"ok")  # type: ignore[attr-defined]

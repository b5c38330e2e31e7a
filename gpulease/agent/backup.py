"""Checkpoint backup and restore between a directory and S3 (domain/snapshots.py has the
layout). Runs on the tenant's server with the tenant's own keys (`gpulease storage key`):
the platform never needs them.

A backup hashes every file (a local cache skips files whose size, mtime and inode have
not moved), lists the contents the prefix already holds, uploads only the missing ones
(s3transfer: many at once, multipart for big files, an optional bandwidth cap shared by
all of them), checks that no file changed while it was read, then writes the manifest: a
run cut short leaves its uploaded contents behind and the next run resumes from them.
A restore reads a manifest (untrusted: paths must stay inside the target), downloads each
content once, verifies its size and SHA-256 before it takes a file's place, and sets the
file's mode and mtime."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig, create_transfer_manager
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from s3transfer.subscribers import BaseSubscriber

from gpulease.domain.snapshots import (
    Manifest,
    SnapshotFile,
    blob_key,
    manifest_key,
    new_snapshot_id,
    normal_prefix,
    safe_relative,
    sha_of_blob_key,
)

CHUNK = 1 << 20
MULTIPART_AT = 64 << 20  # files from this size go up in parts
PART = 16 << 20
Progress = Callable[[int], None]  # bytes moved since the last call


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """Where snapshots go: an S3 endpoint, a bucket and a prefix in it."""

    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    prefix: str = ""
    region: str = "us-east-1"

    def client(self, parallel: int) -> Any:
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key, region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, max_pool_connections=parallel + 4,
                          retries={"max_attempts": 5, "mode": "standard"},
                          connect_timeout=10, read_timeout=120))


@dataclass
class BackupResult:
    snapshot_id: str
    files: int
    bytes_total: int
    bytes_uploaded: int
    contents_uploaded: int
    contents_present: int  # already in the bucket: not sent again
    seconds: float
    skipped: list[str] = field(default_factory=list)


@dataclass
class RestoreResult:
    snapshot_id: str
    files: int
    bytes_total: int
    bytes_downloaded: int
    seconds: float
    verified: bool = True


def _call(what: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    try:
        return fn(*args, **kw)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise BackupError(f"the object store refused {what}: {error.get('Code')} "
                          f"{error.get('Message', '')}".strip()) from None
    except BotoCoreError as exc:
        raise BackupError(f"the object store did not answer {what}: {exc}") from None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def walk_files(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Regular files under root (relative POSIX paths, their stat); links and special
    files are reported by name with a None stat through `skipped` by the caller."""
    stack = [root]
    while stack:
        here = stack.pop()
        with os.scandir(here) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                else:
                    yield Path(e.path).relative_to(root).as_posix(), e.stat(
                        follow_symlinks=False)


class HashCache:
    """Content hashes of files whose size, mtime and inode are unchanged since last time,
    kept outside the directory backed up."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        if path is not None and path.exists():
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache costs a re-hash, nothing else

    def get(self, rel: str, st: os.stat_result) -> str | None:
        hit = self.entries.get(rel)
        if hit and hit[:3] == [st.st_size, st.st_mtime_ns, st.st_ino]:
            return str(hit[3])
        return None

    def put(self, rel: str, st: os.stat_result, sha: str) -> None:
        self.entries[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, sha]

    def save(self, keep: set[str]) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: v for k, v in self.entries.items() if k in keep}))
        os.replace(tmp, self.path)


def default_cache(source: Path, target: Target) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = hashlib.sha256(f"{source.resolve()}|{target.endpoint}|{target.bucket}|"
                         f"{target.prefix}".encode()).hexdigest()[:16]
    return base / "gpulease" / f"backup-{tag}.json"


def present_contents(s3: Any, target: Target, prefix: str) -> set[str]:
    """The content hashes the prefix holds already."""
    found: set[str] = set()
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket,
                                                         Prefix=f"{prefix}blobs/")
    try:
        for page in pages:
            for obj in page.get("Contents", []):
                sha = sha_of_blob_key(prefix, str(obj["Key"]))
                if sha:
                    found.add(sha)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "NoSuchBucket":
            raise BackupError(f"no bucket {target.bucket} at {target.endpoint}; "
                              "`gpulease storage` shows yours") from None
        raise BackupError(f"the object store refused the listing: {code}") from None
    except BotoCoreError as exc:
        raise BackupError(f"the object store at {target.endpoint} did not answer: "
                          f"{exc}") from None
    return found


def _abort_stale_uploads(s3: Any, target: Target, prefix: str) -> None:
    """Parts of uploads a run cut short left behind (their files are sent again whole)."""
    try:
        listed = s3.list_multipart_uploads(Bucket=target.bucket, Prefix=f"{prefix}blobs/")
        for up in listed.get("Uploads", []):
            s3.abort_multipart_upload(Bucket=target.bucket, Key=up["Key"],
                                      UploadId=up["UploadId"])
    except (ClientError, BotoCoreError):
        pass  # best effort: a store without the call keeps them until its lifecycle rule


@dataclass(frozen=True)
class Pace:
    """How a transfer goes: files in flight at once, a bandwidth cap, and who hears of it
    (`plan` the bytes it will move once it knows them; `progress` the bytes as they go)."""

    parallel: int = 8
    max_bytes_per_s: int | None = None
    progress: Progress | None = None
    plan: Callable[[int], None] | None = None


def _manager(s3: Any, pace: Pace) -> Any:
    config = TransferConfig(multipart_threshold=MULTIPART_AT, multipart_chunksize=PART,
                            max_concurrency=pace.parallel, use_threads=True,
                            max_bandwidth=pace.max_bytes_per_s)
    return create_transfer_manager(s3, config)


class _Counter(BaseSubscriber):  # type: ignore[misc]  # untyped base
    """Passes the bytes each transfer moves on to a progress callback."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress

    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress(bytes_transferred)


def backup(source: Path, target: Target, *, cache: Path | None = None,
           host: str | None = None, pace: Pace = Pace()) -> BackupResult:
    """One snapshot of `source` (see the module's docstring), at `pace`."""
    started = time.monotonic()
    if not source.is_dir():
        raise BackupError(f"{source} is not a directory")
    prefix = normal_prefix(target.prefix)
    s3 = target.client(pace.parallel)
    present = present_contents(s3, target, prefix)
    _abort_stale_uploads(s3, target, prefix)
    hashes = HashCache(cache)
    listed, skipped = [], []
    for rel, st in walk_files(source):
        if stat.S_ISREG(st.st_mode):
            listed.append((rel, st))
        else:
            skipped.append(rel)

    def hashed(item: tuple[str, os.stat_result]) -> tuple[str, os.stat_result, str | None]:
        rel, st = item
        known = hashes.get(rel, st)
        if known:
            return rel, st, known
        try:
            return rel, st, sha256_of(source / rel)
        except OSError:
            return rel, st, None  # vanished or unreadable: skipped, said in the manifest

    with ThreadPoolExecutor(max_workers=max(2, min(pace.parallel, os.cpu_count() or 2))) as pool:
        results = list(pool.map(hashed, listed))
    files: list[SnapshotFile] = []
    to_send: dict[str, tuple[str, os.stat_result]] = {}
    for rel, st, sha in results:
        if sha is None:
            skipped.append(rel)
            continue
        hashes.put(rel, st, sha)
        files.append(SnapshotFile(path=rel, size=st.st_size, mode=stat.S_IMODE(st.st_mode),
                                  mtime_ns=st.st_mtime_ns, sha256=sha))
        if sha not in present and sha not in to_send:
            to_send[sha] = (rel, st)

    if pace.plan is not None:
        pace.plan(sum(st.st_size for _, st in to_send.values()))
    manager = _manager(s3, pace)
    counter = _Counter(pace.progress)
    try:
        futures = [manager.upload(str(source / rel), target.bucket, blob_key(prefix, sha),
                                  extra_args={"Metadata": {"sha256": sha}},
                                  subscribers=[counter])
                   for sha, (rel, _) in to_send.items()]
        for f in futures:
            try:
                f.result()
            except (ClientError, BotoCoreError, OSError) as exc:
                raise BackupError(f"an upload failed ({exc}); run the backup again: what "
                                  "was sent is kept and not sent twice") from None
    finally:
        manager.shutdown()
    changed = [rel for _, (rel, st) in to_send.items() if _moved(source / rel, st)]
    if changed:
        raise BackupError(f"{len(changed)} file(s) changed while they were read (e.g. "
                          f"{changed[0]}); run the backup again once writes settle")
    snapshot = Manifest(id=new_snapshot_id(), created_at=datetime.now(UTC),
                        host=host or socket.gethostname(), source=str(source),
                        files=sorted(files, key=lambda f: f.path), skipped=sorted(skipped))
    body = snapshot.model_dump_json().encode()
    _call("the manifest", s3.put_object, Bucket=target.bucket,
          Key=manifest_key(prefix, snapshot.id), Body=body, ContentType="application/json",
          Metadata={"sha256": hashlib.sha256(body).hexdigest()})
    hashes.save({f.path for f in files})
    return BackupResult(snapshot_id=snapshot.id, files=len(files),
                        bytes_total=snapshot.total_bytes,
                        bytes_uploaded=sum(st.st_size for _, st in to_send.values()),
                        contents_uploaded=len(to_send),
                        contents_present=len({f.sha256 for f in files}) - len(to_send),
                        seconds=round(time.monotonic() - started, 3), skipped=skipped)


def _moved(path: Path, before: os.stat_result) -> bool:
    try:
        now = path.stat()
    except OSError:
        return True
    return (now.st_size, now.st_mtime_ns) != (before.st_size, before.st_mtime_ns)


def list_snapshots(target: Target) -> list[dict[str, Any]]:
    """The prefix's snapshots, newest first: id, when, size of the manifest."""
    prefix = normal_prefix(target.prefix)
    s3 = target.client(2)
    out: list[dict[str, Any]] = []
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket,
                                                         Prefix=f"{prefix}snapshots/")
    try:
        for page in pages:
            for obj in page.get("Contents", []):
                name = str(obj["Key"]).rsplit("/", 1)[1]
                if name.endswith(".json"):
                    out.append({"id": name.removesuffix(".json"),
                                "stored_at": obj["LastModified"].isoformat()})
    except (ClientError, BotoCoreError) as exc:
        raise BackupError(f"the object store refused the listing: {exc}") from None
    return sorted(out, key=lambda s: s["id"], reverse=True)


def read_manifest(s3: Any, target: Target, prefix: str, snapshot_id: str) -> Manifest:
    got = _call(f"snapshot {snapshot_id}", s3.get_object, Bucket=target.bucket,
                Key=manifest_key(prefix, snapshot_id))
    body = got["Body"].read()
    expected = got.get("Metadata", {}).get("sha256")
    if expected and hashlib.sha256(body).hexdigest() != expected:
        raise BackupError(f"snapshot {snapshot_id}'s manifest does not match its checksum")
    try:
        return Manifest.model_validate_json(body)
    except ValueError as exc:
        raise BackupError(f"snapshot {snapshot_id}'s manifest is not valid: "
                          f"{str(exc).splitlines()[0]}") from None


def restore(target: Target, snapshot_id: str, dest: Path, *,
            pace: Pace = Pace()) -> RestoreResult:
    """The snapshot's files under `dest`, each content verified by size and SHA-256 before
    any file takes its place (a content several files share is downloaded once)."""
    started = time.monotonic()
    prefix = normal_prefix(target.prefix)
    s3 = target.client(pace.parallel)
    manifest = read_manifest(s3, target, prefix, snapshot_id)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    firsts: dict[str, SnapshotFile] = {}
    for f in manifest.files:
        path = (root / safe_relative(f.path)).resolve()
        if root not in path.parents:
            raise BackupError(f"snapshot {snapshot_id} names a path outside {dest}: {f.path}")
        firsts.setdefault(f.sha256, f)
    if pace.plan is not None:
        pace.plan(sum(f.size for f in firsts.values()))
    staging = root / ".gpulease-restore"
    shutil.rmtree(staging, ignore_errors=True)  # a run killed before its end left it
    staging.mkdir()
    try:
        _place(_Fetch(s3, target, prefix, snapshot_id, pace), manifest, firsts, root, staging)
    finally:  # whatever the end: no staging folder is left in the tenant's directory
        shutil.rmtree(staging, ignore_errors=True)
    return RestoreResult(snapshot_id=snapshot_id, files=len(manifest.files),
                         bytes_total=manifest.total_bytes,
                         bytes_downloaded=sum(f.size for f in firsts.values()),
                         seconds=round(time.monotonic() - started, 3))


@dataclass(frozen=True)
class _Fetch:
    """Where a restore's contents come from: the store, the snapshot, and its pace."""

    s3: Any
    target: Target
    prefix: str
    snapshot_id: str
    pace: Pace


def _place(fetch: _Fetch, manifest: Manifest, firsts: dict[str, SnapshotFile], root: Path,
           staging: Path) -> None:
    """Each content fetched into `staging` and checked, then every file put in place."""
    s3, target, prefix, snapshot_id, pace = (fetch.s3, fetch.target, fetch.prefix,
                                             fetch.snapshot_id, fetch.pace)
    manager = _manager(s3, pace)
    counter = _Counter(pace.progress)
    try:
        futures = [(sha, manager.download(target.bucket, blob_key(prefix, sha),
                                          str(staging / sha), subscribers=[counter]))
                   for sha in firsts]
        for sha, fut in futures:
            try:
                fut.result()
            except (ClientError, BotoCoreError, OSError) as exc:
                raise BackupError(f"content {sha[:12]}… of snapshot {snapshot_id} could not "
                                  f"be read ({exc})") from None
    finally:
        manager.shutdown()
    for sha, f in firsts.items():
        got = staging / sha
        if got.stat().st_size != f.size or sha256_of(got) != sha:
            raise BackupError(f"content of {f.path} in snapshot {snapshot_id} does not "
                              "match its checksum; nothing of it was put in place")
    uses = {sha: 0 for sha in firsts}
    for f in manifest.files:
        uses[f.sha256] += 1
    for f in manifest.files:
        path = root / safe_relative(f.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        uses[f.sha256] -= 1
        tmp = staging / sha if (sha := f.sha256) and uses[sha] == 0 else (
            path.with_name(f".{path.name}.gpulease-restore"))
        if uses[sha]:  # another file still needs this content: a copy
            shutil.copyfile(staging / sha, tmp)
        os.chmod(tmp, f.mode)
        os.utime(tmp, ns=(f.mtime_ns, f.mtime_ns))
        os.replace(tmp, path)


DATA_MOUNT = "/data"  # where a rented server's data disk is mounted (domain: NodeConfig)


def on_data_disk(root: Path, path: str) -> Path:
    """Where `path` (absolute, under /data, as the tenant names it) lies under `root` (the
    data disk's mount, or a simulated server's disk directory); ValueError outside it."""
    from pathlib import PurePosixPath

    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts or not (
            p == PurePosixPath(DATA_MOUNT) or PurePosixPath(DATA_MOUNT) in p.parents):
        raise ValueError(f"{path!r} is not on the data disk ({DATA_MOUNT}/…)")
    return root.joinpath(*p.relative_to(DATA_MOUNT).parts)


class Tally:
    """Bytes to move and moved so far, told to `report(moved, total)` at most every
    `every_s` seconds (and once at the start), from any transfer thread."""

    def __init__(self, report: Callable[[int, int], None] | None, every_s: float = 2.0
                 ) -> None:
        import threading

        self.report, self.every_s = report, every_s
        self.total = self.moved = 0
        self.lock = threading.Lock()
        self.last = 0.0

    def plan(self, total: int) -> None:
        self.total = total
        self._tell(force=True)

    def __call__(self, n: int) -> None:
        with self.lock:
            self.moved += n
        self._tell()

    def _tell(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.report is None or (not force and now - self.last < self.every_s):
            return
        self.last = now
        with contextlib.suppress(Exception):  # a lost report never stops the transfer
            self.report(min(self.moved, self.total), self.total)


def run_transfer(root: Path, payload: Any, simulated: bool = False,
                 report: Callable[[int, int], None] | None = None) -> Any:
    """A backup or restore command (ports/agent.BackupPayload / RestorePayload) carried out
    on the data disk mounted at `root`; its TransferResult. `report(moved, total)` hears
    its progress every few seconds."""
    from gpulease.ports.agent import RestorePayload, TransferResult

    target = Target(endpoint=payload.endpoint, bucket=payload.bucket,
                    access_key_id=payload.access_key_id,
                    secret_access_key=payload.secret_access_key, prefix=payload.prefix)
    where = on_data_disk(root, payload.path)
    rate = int(payload.max_mbps * 1e6) if payload.max_mbps else None
    tally = Tally(report)
    pace = Pace(max_bytes_per_s=rate, progress=tally, plan=tally.plan)
    if isinstance(payload, RestorePayload):
        done = restore(target, payload.snapshot_id, where, pace=pace)
        return TransferResult(snapshot_id=done.snapshot_id, files=done.files,
                              bytes_total=done.bytes_total, bytes_moved=done.bytes_downloaded,
                              seconds=done.seconds, simulated=simulated)
    where.mkdir(parents=True, exist_ok=True)
    made = backup(where, target, cache=default_cache(where, target), pace=pace)
    return TransferResult(snapshot_id=made.snapshot_id, files=made.files,
                          bytes_total=made.bytes_total, bytes_moved=made.bytes_uploaded,
                          seconds=made.seconds, simulated=simulated,
                          skipped=made.skipped[:1000])

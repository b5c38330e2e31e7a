"""Checkpoint snapshots in object storage: what a snapshot's manifest holds and where its
parts live in a bucket. No I/O here (agent/backup.py moves the bytes).

Layout under a prefix (default `backups/<host>/`):
- `blobs/<aa>/<sha256>`: a file's content, stored once however many files and snapshots
  hold it (a backup uploads only the contents the prefix does not have yet: incremental by
  content hash, and a run cut short resumes where it stopped);
- `snapshots/<id>.json`: one manifest per snapshot, every file with its size, mode, mtime
  and SHA-256; the manifest's own SHA-256 rides in its object metadata.

A manifest is read back from a bucket that the tenant (and anything with their keys) can
write: restore treats it as untrusted input (paths checked to stay under the target)."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from pathlib import PurePosixPath

from pydantic import BaseModel, Field, field_validator

FORMAT = 1
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SNAPSHOT_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")


class SnapshotFile(BaseModel):
    path: str = Field(min_length=1, max_length=4096)  # relative, POSIX separators
    size: int = Field(ge=0)
    mode: int = Field(ge=0, le=0o7777)
    mtime_ns: int
    sha256: str

    @field_validator("path")
    @classmethod
    def _relative_inside(cls, v: str) -> str:
        safe_relative(v)
        return v

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str) -> str:
        if not SHA256.match(v):
            raise ValueError("not a SHA-256 in lowercase hex")
        return v


class Manifest(BaseModel):
    format: int = FORMAT
    id: str
    created_at: datetime
    host: str = Field(max_length=255)
    source: str = Field(max_length=4096)  # the directory backed up, on its host
    files: list[SnapshotFile]
    skipped: list[str] = Field(default_factory=list)  # links, sockets, unreadable files

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not SNAPSHOT_ID.match(v):
            raise ValueError("not a snapshot id (YYYYmmddTHHMMSSZ-xxxxxx)")
        return v


def safe_relative(path: str) -> PurePosixPath:
    """A manifest path that stays inside the directory it is restored to, or ValueError."""
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or any(part in ("..", ".", "") for part in p.parts) or (
            "\\" in path or "\x00" in path):
        raise ValueError(f"unsafe path in a snapshot: {path!r}")
    return p


def new_snapshot_id(now: datetime | None = None) -> str:
    """Sortable by time: `20261201T193255Z-3fa9c1`."""
    at = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{at:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def normal_prefix(prefix: str) -> str:
    """`backups/host-1/` from `/backups/host-1` (no leading slash, one trailing)."""
    cleaned = "/".join(part for part in prefix.split("/") if part)
    if any(part in ("..", ".") for part in cleaned.split("/")):
        raise ValueError(f"unsafe prefix {prefix!r}")
    return f"{cleaned}/" if cleaned else ""


def blob_key(prefix: str, sha256: str) -> str:
    return f"{prefix}blobs/{sha256[:2]}/{sha256}"


def manifest_key(prefix: str, snapshot_id: str) -> str:
    return f"{prefix}snapshots/{snapshot_id}.json"


def sha_of_blob_key(prefix: str, key: str) -> str | None:
    """The content hash a blob's key names (None: not a blob key)."""
    tail = key.removeprefix(f"{prefix}blobs/")
    if tail == key or "/" not in tail:
        return None
    sha = tail.rsplit("/", 1)[1]
    return sha if SHA256.match(sha) else None

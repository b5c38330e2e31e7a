"""The object storage port: a bucket per tenant and access keys scoped to it, on any S3
with an IAM API (the embedded SeaweedFS, MinIO, Ceph RGW, a cloud)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class ObjectStoreError(Exception):
    """The object store refused or did not answer; the message says which and why."""


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret_access_key: str


class ObjectStore(Protocol):
    endpoint: str

    def ensure_bucket(self, bucket: str) -> None:
        """Create the bucket unless it exists."""
        ...

    def create_key(self, user: str, bucket: str, prefix: str | None = None) -> AccessKey:
        """A new access key of `user`, allowed on `bucket`'s objects only (with `prefix`:
        on the objects under it, and to list the bucket)."""
        ...

    def delete_key(self, user: str, access_key_id: str) -> None:
        ...

    def delete_user(self, user: str) -> None:
        """`user` gone with its policy once it holds no key (one run's user, when the run
        ends); a user still holding a key stays."""
        ...

    def set_writable(self, user: str, bucket: str, writable: bool) -> None:
        """What `user`'s keys may do on `bucket`: its objects (read, list, write, delete;
        never the bucket's own settings), or (past its quota) read, list and delete only,
        so the tenant can make room but not add. Any bucket policy on `bucket` is removed:
        the bucket's access is the platform's alone."""
        ...

    def bucket_bytes(self, bucket: str) -> int:
        """What the bucket holds now, in bytes."""
        ...

"""`gpulease agent backup|snapshots|restore`: checkpoints to and from S3, run on the rented
server with the tenant's own keys (`gpulease storage key`; the standard AWS_ACCESS_KEY_ID
and AWS_SECRET_ACCESS_KEY variables, or the options)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.cli.agent.commands import agent_app, err, out
from gpulease.cli.words import _

if TYPE_CHECKING:
    from gpulease.agent.backup import Pace

EndpointOpt = Annotated[str, typer.Option(
    envvar="GPULEASE_S3_ENDPOINT", help="the S3 endpoint (`gpulease storage` shows it)")]
BucketOpt = Annotated[str, typer.Option(envvar="GPULEASE_S3_BUCKET",
                                        help="the bucket (`gpulease storage` shows yours)")]
PrefixOpt = Annotated[str, typer.Option(
    help="where in the bucket (default backups/<this host>/)")]
KeyOpt = Annotated[str, typer.Option("--access-key-id", envvar="AWS_ACCESS_KEY_ID",
                                     help="access key id (or AWS_ACCESS_KEY_ID)")]
SecretOpt = Annotated[str, typer.Option(
    "--secret-access-key", envvar="AWS_SECRET_ACCESS_KEY", show_default=False,
    help="its secret (or AWS_SECRET_ACCESS_KEY; better than on the command line)")]
ParallelOpt = Annotated[int, typer.Option(min=1, max=64, help="transfers at once")]
RateOpt = Annotated[float | None, typer.Option(
    "--max-mbps", min=0.1, help="bandwidth cap in MB/s over all transfers")]
JsonOut = Annotated[bool, typer.Option("--json", help="print the result as JSON")]


def _target(endpoint: str, bucket: str, key: str, secret: str, prefix: str | None):  # type: ignore[no-untyped-def]
    import socket

    from gpulease.agent.backup import Target

    if not (key and secret):
        err.print(_("[red]error[/red]: no keys: set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (a key from `gpulease storage key`)"))
        raise typer.Exit(2)
    return Target(endpoint=endpoint, bucket=bucket, access_key_id=key,
                  secret_access_key=secret,
                  prefix=prefix if prefix is not None else f"backups/{socket.gethostname()}")


class _Meter:
    """Bytes moved so far, shown on stderr about once a second when it is a terminal."""

    def __init__(self) -> None:
        self.moved, self.lock, self.shown = 0, threading.Lock(), 0.0

    def __call__(self, n: int) -> None:
        with self.lock:
            self.moved += n
            now = time.monotonic()
            if sys.stderr.isatty() and now - self.shown >= 1:
                self.shown = now
                err.print(_("  {mb:,.0f} MB moved", mb=self.moved / 1e6), end="\r")


def _pace(parallel: int, max_mbps: float | None) -> Pace:
    from gpulease.agent.backup import Pace

    return Pace(parallel=parallel, max_bytes_per_s=int(max_mbps * 1e6) if max_mbps else None,
                progress=_Meter())


def _fail(exc: Exception) -> typer.Exit:
    err.print(_("[red]error[/red]: {error}", error=exc))
    return typer.Exit(1)


@agent_app.command("backup")
def backup(
    path: Annotated[Path, typer.Argument(help="the directory to back up")] = Path(
        "/data/checkpoints"),
    endpoint: EndpointOpt = "", bucket: BucketOpt = "", prefix: PrefixOpt | None = None,
    access_key_id: KeyOpt = "", secret_access_key: SecretOpt = "",
    parallel: ParallelOpt = 8, max_mbps: RateOpt = None,
    cache: Annotated[Path | None, typer.Option(
        help="hash cache (default under ~/.cache/gpulease)")] = None,
    as_json: JsonOut = False,
) -> None:
    """Back a directory up as a snapshot: only contents the bucket does not hold yet are
    sent (incremental by SHA-256; a run cut short resumes), big files in parts, many at
    once, one manifest with every file's checksum."""
    from gpulease.agent.backup import BackupError, default_cache
    from gpulease.agent.backup import backup as run_backup

    target = _target(endpoint, bucket, access_key_id, secret_access_key, prefix)
    try:
        result = run_backup(path, target, cache=cache or default_cache(path, target),
                            pace=_pace(parallel, max_mbps))
    except (BackupError, ValueError) as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps(asdict(result), indent=2))
        return
    out.print(_("snapshot {snapshot}: {files} files, {total:,.1f} MB; sent {sent:,.1f} MB "
                "({new} new contents, {present} already stored) in {seconds:.1f} s",
                snapshot=result.snapshot_id, files=result.files,
                total=result.bytes_total / 1e6, sent=result.bytes_uploaded / 1e6,
                new=result.contents_uploaded, present=result.contents_present,
                seconds=result.seconds)
              + (f"; skipped {len(result.skipped)} (links, special files)" if result.skipped
                 else ""), highlight=False)


@agent_app.command("snapshots")
def snapshots(
    endpoint: EndpointOpt = "", bucket: BucketOpt = "", prefix: PrefixOpt | None = None,
    access_key_id: KeyOpt = "", secret_access_key: SecretOpt = "", as_json: JsonOut = False,
) -> None:
    """The snapshots under the prefix, newest first."""
    from gpulease.agent.backup import BackupError, list_snapshots

    try:
        found = list_snapshots(_target(endpoint, bucket, access_key_id, secret_access_key,
                                       prefix))
    except BackupError as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps(found, indent=2))
        return
    for snap in found:
        out.print(_("{snapshot}  stored {at}", snapshot=snap["id"], at=snap["stored_at"][:19]),
                  highlight=False)
    if not found:
        out.print(_("no snapshots under this prefix"))


@agent_app.command("restore")
def restore(
    snapshot: Annotated[str, typer.Argument(help="the snapshot id (`gpulease agent "
                                                 "snapshots`)")],
    dest: Annotated[Path, typer.Argument(help="the directory to restore into")],
    endpoint: EndpointOpt = "", bucket: BucketOpt = "", prefix: PrefixOpt | None = None,
    access_key_id: KeyOpt = "", secret_access_key: SecretOpt = "",
    parallel: ParallelOpt = 8, max_mbps: RateOpt = None, as_json: JsonOut = False,
) -> None:
    """Restore a snapshot: every content checked against its SHA-256 before any file takes
    its place; modes and modification times as they were."""
    from gpulease.agent.backup import BackupError
    from gpulease.agent.backup import restore as run_restore

    target = _target(endpoint, bucket, access_key_id, secret_access_key, prefix)
    try:
        result = run_restore(target, snapshot, dest, pace=_pace(parallel, max_mbps))
    except (BackupError, ValueError) as exc:
        raise _fail(exc) from None
    if as_json:
        print(json.dumps(asdict(result), indent=2))
        return
    out.print(_("snapshot {snapshot}: {files} files, {mb:,.1f} MB restored into {path} and "
                "verified in {seconds:.1f} s", snapshot=snapshot, files=result.files,
                mb=result.bytes_total / 1e6, path=dest, seconds=result.seconds),
              highlight=False)

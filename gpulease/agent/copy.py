"""A directory of one server's data disk copied straight to another's (a swap's faulty
server to its spare), with no bucket between them.

The source serves, the destination fetches, over HTTP between the provider's servers. The
control plane gives both the same 32-byte key; it authenticates every request (a bearer
derived from it) and encrypts and authenticates every byte (AES-256-GCM, 1 MiB frames):
a stranger on the network reads nothing, and no byte can be changed, reordered or cut off
unseen. The source lists the files with their size, mode, mtime and SHA-256 (a manifest,
untrusted by the destination: paths must stay inside its directory); the destination
writes each file beside its place, checks its size and SHA-256, and only then moves it
into place. A file already there with the same size, mtime and checksum is kept (a copy
tried again resumes). A file that changed on the source while it was copied fails the
copy with its name: the tenant's server serves on meanwhile.

Frame: 4-byte big-endian length, then AES-GCM(nonce = 4 zero bytes, 4-byte file number,
4-byte frame number; associated data = copy id, file number and whether it is the last
frame). The manifest is file number 0xFFFFFFFF."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gpulease.agent.backup import Tally, on_data_disk, sha256_of, walk_files
from gpulease.domain.snapshots import Manifest, SnapshotFile, new_snapshot_id, safe_relative
from gpulease.ports.agent import ReceivePayload, SendPayload, TransferResult

FRAME = 1 << 20
MANIFEST = 0xFFFFFFFF
RETRY_S = 2.0  # the destination asks again while the source is not serving yet
PART = ".gpulease-copy"


class CopyError(Exception):
    """The copy could not be made; says why."""


def new_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _key(payload: SendPayload) -> bytes:
    key = base64.urlsafe_b64decode(payload.key)
    if len(key) != 32:
        raise CopyError("the copy's key is not 32 bytes")
    return key


def bearer(key: bytes, copy_id: str) -> str:
    return hmac.new(key, f"gpulease-copy:{copy_id}".encode(), hashlib.sha256).hexdigest()


def _nonce(number: int, frame: int) -> bytes:
    return b"\0\0\0\0" + struct.pack(">II", number, frame)


def _aad(copy_id: str, number: int, last: bool) -> bytes:
    return f"{copy_id}|{number}|{'last' if last else 'more'}".encode()


def seal_frames(aead: AESGCM, copy_id: str, number: int, chunks: Iterator[bytes]
                ) -> Iterator[bytes]:
    """The chunks as frames; the last one marked (an empty source is one empty frame)."""
    frame, pending = 0, next(chunks, b"")
    while True:
        following = next(chunks, None)
        sealed = aead.encrypt(_nonce(number, frame), pending,
                              _aad(copy_id, number, following is None))
        yield struct.pack(">I", len(sealed)) + sealed
        if following is None:
            return
        frame, pending = frame + 1, following


def open_frames(aead: AESGCM, copy_id: str, number: int, stream: Iterator[bytes]
                ) -> Iterator[bytes]:
    """The plaintext of a stream of frames; CopyError when one was altered, the frames
    came out of order or the stream ended before its last frame."""
    buffer, frame, ended = bytearray(), 0, False
    for piece in stream:
        if ended:
            if piece:
                raise CopyError("bytes follow the last frame")
            continue
        buffer += piece
        while len(buffer) >= 4:
            size = struct.unpack(">I", buffer[:4])[0]
            if size > FRAME + 64:
                raise CopyError("a frame is larger than any the source sends")
            if len(buffer) < 4 + size:
                break
            sealed = bytes(buffer[4:4 + size])
            del buffer[:4 + size]
            for last in (False, True):
                try:
                    plain = aead.decrypt(_nonce(number, frame), sealed,
                                         _aad(copy_id, number, last))
                except InvalidTag:
                    continue
                yield plain
                ended = last
                break
            else:
                raise CopyError("a frame does not authenticate: altered, out of order, or "
                                "sealed with another key")
            if ended:
                if buffer:
                    raise CopyError("bytes follow the last frame")
                break
            frame += 1
    if not ended:
        raise CopyError("the stream ended before its last frame")


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(FRAME):
            yield chunk


def list_files(where: Path, report: Callable[[int, int], None] | None = None) -> Manifest:
    """The directory's regular files with their checksums (links and special files are
    named in `skipped`)."""
    files, skipped = [], []
    found = list(walk_files(where)) if where.exists() else []
    tally = Tally(report)
    tally.plan(sum(st.st_size for _, st in found))
    for rel, st in sorted(found):
        full = where / rel
        if not full.is_file() or full.is_symlink():
            skipped.append(rel)
            continue
        try:
            sha = sha256_of(full)
        except OSError:
            skipped.append(rel)
            continue
        files.append(SnapshotFile(path=rel, size=st.st_size, mode=st.st_mode & 0o7777,
                                  mtime_ns=st.st_mtime_ns, sha256=sha))
        tally(st.st_size)
    return Manifest(id=new_snapshot_id(), created_at=datetime.now(UTC),
                    host=socket.gethostname()[:255], source=str(where), files=files,
                    skipped=skipped)


@dataclass
class _Serving:
    manifest: Manifest
    where: Path
    aead: AESGCM
    token: str
    copy_id: str
    done: threading.Event
    sent: int = 0


def _handler(state: _Serving) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _refuse(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _authorized(self) -> bool:
            got = self.headers.get("Authorization", "").removeprefix("Bearer ")
            return hmac.compare_digest(got, state.token)

        def _stream(self, number: int, chunks: Iterator[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            for frame in seal_frames(state.aead, state.copy_id, number, chunks):
                self.wfile.write(frame)
                with lock:
                    state.sent += len(frame)

        def do_GET(self) -> None:  # the http.server interface
            prefix = f"/copy/{state.copy_id}/"
            if not self.path.startswith(prefix) or not self._authorized():
                return self._refuse(404)
            what = self.path[len(prefix):]
            if what == "manifest":
                return self._stream(MANIFEST, iter([state.manifest.model_dump_json()
                                                    .encode()]))
            number = what.removeprefix("files/")
            if not number.isdigit() or int(number) >= len(state.manifest.files):
                return self._refuse(404)
            entry = state.manifest.files[int(number)]
            try:
                self._stream(int(number), _chunks(state.where / entry.path))
            except OSError:
                self.close_connection = True  # the destination sees a cut stream

        def do_POST(self) -> None:  # the http.server interface
            if self.path != f"/copy/{state.copy_id}/done" or not self._authorized():
                return self._refuse(404)
            self._refuse(204)
            state.done.set()

    return Handler


def serve(root: Path, payload: SendPayload, report: Callable[[int, int], None] | None = None,
          bind: tuple[str, int] | None = None,
          listening: Callable[[int], None] | None = None,
          simulated: bool = False) -> TransferResult:
    """The source's side: list and checksum the directory, then serve it until the
    destination says it has everything (or `wait_s` pass: CopyError). `bind` defaults to
    every address on the payload's port; `listening(port)` hears the port bound."""
    started = time.monotonic()
    key = _key(payload)
    where = on_data_disk(root, payload.path)
    manifest = list_files(where, report)
    state = _Serving(manifest, where, AESGCM(key), bearer(key, payload.copy_id),
                     payload.copy_id, threading.Event())
    server = ThreadingHTTPServer(bind or ("0.0.0.0", payload.port), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="copy-source", daemon=True)
    thread.start()
    try:
        if listening is not None:
            listening(int(server.server_address[1]))
        if not state.done.wait(payload.wait_s):
            raise CopyError(f"the destination did not fetch the copy within "
                            f"{payload.wait_s:.0f} s")
    finally:
        server.shutdown()
        server.server_close()
    return TransferResult(snapshot_id=manifest.id, files=len(manifest.files),
                          bytes_total=manifest.total_bytes, bytes_moved=state.sent,
                          seconds=round(time.monotonic() - started, 3), simulated=simulated,
                          skipped=manifest.skipped[:1000])


def _already_there(path: Path, entry: SnapshotFile) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return (st.st_size, st.st_mtime_ns) == (entry.size, entry.mtime_ns) and (
        sha256_of(path) == entry.sha256)


def fetch(root: Path, payload: ReceivePayload,
          report: Callable[[int, int], None] | None = None,
          address: Callable[[], tuple[str, int] | None] | None = None,
          simulated: bool = False) -> TransferResult:
    """The destination's side: the source's files under the same path, each verified
    before it takes its place; then the source is told it is done. `address()` says where
    the source serves (None: not yet); by default the payload's source and port."""
    started = time.monotonic()
    key = _key(payload)
    aead = AESGCM(key)
    where = on_data_disk(root, payload.path)
    where.mkdir(parents=True, exist_ok=True)
    root_dir = where.resolve()
    headers = {"Authorization": f"Bearer {bearer(key, payload.copy_id)}"}
    deadline = time.monotonic() + payload.wait_s
    locate = address or (lambda: (payload.source, payload.port))
    with httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0), headers=headers) as client:
        base, manifest = _manifest(client, aead, payload.copy_id, locate, deadline)
        channel = _Channel(client, aead, payload.copy_id, base)
        tally = Tally(report)
        tally.plan(manifest.total_bytes)
        moved = 0
        for number, entry in enumerate(manifest.files):
            path = (root_dir / safe_relative(entry.path)).resolve()
            if root_dir not in path.parents:
                raise CopyError(f"the source names a path outside {payload.path}: "
                                f"{entry.path}")
            if _already_there(path, entry):
                tally(entry.size)
                continue
            moved += _fetch_file(channel, number, entry, path, tally)
        with contextlib.suppress(httpx.HTTPError):  # it stops at its deadline anyway
            client.post(f"{base}/done")
    return TransferResult(snapshot_id=manifest.id, files=len(manifest.files),
                          bytes_total=manifest.total_bytes, bytes_moved=moved,
                          seconds=round(time.monotonic() - started, 3), simulated=simulated,
                          skipped=manifest.skipped[:1000])


def _manifest(client: httpx.Client, aead: AESGCM, copy_id: str,
              locate: Callable[[], tuple[str, int] | None], deadline: float
              ) -> tuple[str, Manifest]:
    """The source's manifest, asked for until it serves (it lists and checksums first)."""
    last = "not serving yet"
    while True:
        found = locate()
        if found is not None:
            host, port = found
            base = f"http://{host}:{port}/copy/{copy_id}"
            try:
                with client.stream("GET", f"{base}/manifest") as resp:
                    if resp.status_code == 200:
                        text = b"".join(open_frames(aead, copy_id, MANIFEST,
                                                    resp.iter_bytes()))
                        return base, Manifest.model_validate_json(text)
                    last = f"it answered {resp.status_code}"
            except httpx.HTTPError as exc:
                last = str(exc) or type(exc).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise CopyError(f"the source did not serve the copy in time ({last})")
        time.sleep(min(RETRY_S, left))


@dataclass(frozen=True)
class _Channel:
    """The source's listener for one copy: the HTTP client, the copy's key and id (which
    every frame is sealed under), and the base address of its files."""

    client: httpx.Client
    aead: AESGCM
    copy_id: str
    base: str


def _fetch_file(channel: _Channel, number: int, entry: SnapshotFile, path: Path,
                tally: Tally) -> int:
    """File `number` of the listing into `path`, through a part file that takes the
    file's place only once its size and checksum match the listing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}{PART}")
    digest, size = hashlib.sha256(), 0
    try:
        with (channel.client.stream("GET", f"{channel.base}/files/{number}") as resp,
              part.open("wb") as out):
            if resp.status_code != 200:
                raise CopyError(f"the source answered {resp.status_code} for {entry.path}")
            for plain in open_frames(channel.aead, channel.copy_id, number, resp.iter_bytes()):
                out.write(plain)
                digest.update(plain)
                size += len(plain)
                tally(len(plain))
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise CopyError(f"{entry.path} changed on the source while it was copied (its "
                            "size or checksum differs from the listing); copy again once "
                            "nothing writes to it")
        os.chmod(part, entry.mode)
        os.utime(part, ns=(entry.mtime_ns, entry.mtime_ns))
        os.replace(part, path)
    except httpx.HTTPError as exc:
        raise CopyError(f"{entry.path} could not be fetched: {exc}") from None
    finally:
        part.unlink(missing_ok=True)
    return size

"""A swap's direct copy (agent/copy.py) between two directories over loopback: what
arrives is what was there, byte for byte, with modes and times; a copy tried again
resumes; a file written meanwhile, a wrong key, an altered or cut stream and a manifest
that points outside the directory are each refused with a reason."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gpulease.agent import copy as direct
from gpulease.agent.copy import CopyError, fetch, new_key, open_frames, seal_frames, serve
from gpulease.ports.agent import ReceivePayload, SendPayload, TransferResult

COPY_ID = "bk-0123456789ab"


def _tree(root: Path) -> dict[str, tuple[bytes, int, int]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o7777,
                                             p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A server's data disk (mounted at /data) with a run's checkpoints."""
    runs = tmp_path / "a" / "runs"
    (runs / "step-1").mkdir(parents=True)
    (runs / "step-1" / "model.safetensors").write_bytes(os.urandom((2 << 20) + 5))
    (runs / "step-1" / "config.json").write_text('{"layers": 80}')
    (runs / "empty").touch()
    os.chmod(runs / "step-1" / "config.json", 0o640)
    os.symlink("step-1", runs / "latest")  # named as skipped, not followed
    return tmp_path / "a"


class Copy:
    """Both sides at once: the source serves from its thread, the destination fetches."""

    def __init__(self, key: str | None = None, wait_s: float = 20.0) -> None:
        self.key = key or new_key()
        self.port: int | None = None
        self.listening = threading.Event()
        self.sent: TransferResult | Exception | None = None
        self.wait_s = wait_s

    def send(self, root: Path) -> threading.Thread:
        payload = SendPayload(copy_id=COPY_ID, path="/data/runs", port=1, key=self.key,
                              wait_s=self.wait_s)

        def run() -> None:
            try:
                self.sent = serve(root, payload, bind=("127.0.0.1", 0),
                                  listening=self._listening)
            except Exception as exc:
                self.sent = exc

        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert self.listening.wait(20)
        return t

    def _listening(self, port: int) -> None:
        self.port = port
        self.listening.set()

    def receive(self, root: Path, key: str | None = None, wait_s: float = 20.0,
                report: object = None) -> TransferResult:
        assert self.port is not None
        payload = ReceivePayload(copy_id=COPY_ID, path="/data/runs", port=self.port,
                                 key=key or self.key, wait_s=wait_s, source="127.0.0.1")
        return fetch(root, payload, report)  # type: ignore[arg-type]


def test_a_directory_arrives_whole_with_modes_and_times_and_resumes(
        source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "b"
    copy = Copy()
    sender = copy.send(source)
    heard: list[tuple[int, int]] = []
    got = copy.receive(dest, report=lambda moved, total: heard.append((moved, total)))
    sender.join(10)
    want = _tree(source / "runs")
    want.pop("latest", None)
    assert _tree(dest / "runs") == want
    assert not (dest / "runs" / "latest").exists()  # a link is not followed
    total = sum(len(b) for b, _, _ in want.values())
    assert (got.files, got.bytes_total, got.bytes_moved) == (3, total, total)
    assert isinstance(copy.sent, TransferResult) and copy.sent.snapshot_id == got.snapshot_id
    assert copy.sent.bytes_moved > total  # the frames' lengths and tags on top
    assert heard and heard[0] == (0, total)

    again = Copy()  # tried again: what is there already, checked, is kept
    sender = again.send(source)
    second = again.receive(dest)
    sender.join(10)
    assert second.bytes_moved == 0 and _tree(dest / "runs") == want


def test_a_wrong_key_gets_nothing_and_the_source_gives_up_in_time(
        source: Path, tmp_path: Path) -> None:
    copy = Copy(wait_s=1.5)
    sender = copy.send(source)
    with pytest.raises(CopyError, match="did not serve the copy in time .*404"):
        copy.receive(tmp_path / "b", key=new_key(), wait_s=1.0)
    sender.join(10)
    assert isinstance(copy.sent, CopyError) and "did not fetch" in str(copy.sent)
    assert not list((tmp_path / "b" / "runs").rglob("*"))  # nothing written


def test_a_file_written_while_it_is_copied_fails_the_copy_with_its_name(
        source: Path, tmp_path: Path) -> None:
    copy = Copy(wait_s=2.0)
    sender = copy.send(source)  # listed and checksummed; then the tenant writes on
    (source / "runs" / "step-1" / "config.json").write_text('{"layers": 96}')
    with pytest.raises(CopyError, match="config.json changed on the source"):
        copy.receive(tmp_path / "b")
    sender.join(10)
    assert not (tmp_path / "b" / "runs" / "step-1" / "config.json").exists()
    assert not list((tmp_path / "b").rglob(f"*{direct.PART}"))  # no part left behind


def _frames(aead: AESGCM, chunks: list[bytes], number: int = 7) -> list[bytes]:
    return list(seal_frames(aead, COPY_ID, number, iter(chunks)))


def test_frames_that_are_altered_reordered_or_cut_are_refused() -> None:
    aead = AESGCM(os.urandom(32))
    chunks = [b"a" * 10, b"b" * 10, b"c" * 3]
    frames = _frames(aead, chunks)
    assert b"".join(open_frames(aead, COPY_ID, 7, iter(frames))) == b"".join(chunks)
    assert list(open_frames(aead, COPY_ID, 7, iter(_frames(aead, [])))) == [b""]
    flipped = bytearray(b"".join(frames))
    flipped[10] ^= 1
    cases: dict[str, Iterator[bytes]] = {
        "altered": iter([bytes(flipped)]),
        "reordered": iter([frames[1], frames[0], frames[2]]),
        "cut": iter(frames[:2]),  # the last frame never came
        "another file's": iter(_frames(aead, chunks, number=8)),
        "padded": iter([*frames, b"\0\0\0\0"]),
    }
    refused = []
    for name, stream in cases.items():
        with pytest.raises(CopyError):
            b"".join(open_frames(aead, COPY_ID, 7, stream))
        refused.append(name)
    assert refused == list(cases)  # every case got as far as its refusal


def test_a_manifest_pointing_outside_the_directory_is_refused(
        source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = direct.list_files

    def hostile(where: Path, report: object = None) -> object:
        made = real(where)
        made.files[0].__dict__["path"] = "../../etc/cron.d/evil"  # past the validator
        return made

    monkeypatch.setattr(direct, "list_files", hostile)
    copy = Copy(wait_s=2.0)
    sender = copy.send(source)
    with pytest.raises(Exception, match="unsafe path|outside"):
        copy.receive(tmp_path / "b")
    sender.join(10)
    assert not (tmp_path / "etc").exists()


def test_the_agents_command_loop_carries_out_both_sides(source: Path, tmp_path: Path) -> None:
    """`gpulease agent`'s side: a send and a receive command, as fetched from the control
    plane, each on its own server's data disk (the source bound to loopback here)."""
    import socket

    from gpulease.agent.phonehome import Keys, NodeOptions, PhoneHome
    from gpulease.ports.agent import ReceiveCommand, SendCommand

    def agent(root: Path, name: str) -> PhoneHome:
        return PhoneHome("http://127.0.0.1:9", state=None,  # type: ignore[arg-type]
                         keys=Keys(tmp_path / f"{name}.cred"),
                         options=NodeOptions(data_root=root, copy_bind="127.0.0.1"))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fields = dict(copy_id=COPY_ID, path="/data/runs", port=port, key=new_key(), wait_s=20.0)
    results: dict[str, TransferResult] = {}

    def run(name: str, root: Path, command: object) -> None:
        results[name] = agent(root, name)._carry_out(command, {})  # type: ignore[arg-type,assignment]

    threads = [threading.Thread(target=run, args=("send", source, SendCommand(
                   id="c1", payload=SendPayload(**fields)))),
               threading.Thread(target=run, args=("receive", tmp_path / "b", ReceiveCommand(
                   id="c2", payload=ReceivePayload(**fields, source="127.0.0.1"))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results["receive"].files == results["send"].files == 3
    assert (tmp_path / "b" / "runs" / "step-1" / "config.json").read_text() == (
        '{"layers": 80}')

"""The stand-in servers' direct copies (a swap's): the real agent/copy.py between their
data-disk directories over loopback. Each side runs in a thread of its own, since a source
serves until its destination is done and the worker must not wait on it; the call answers
Pending meanwhile, with the progress so far. A source binds any free loopback port and
writes it beside the disks (`.copies/<copy id>.port`), where its destination looks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from gpulease.agent.copy import CopyError, fetch, serve
from gpulease.ports.agent import (
    AgentError,
    NodeRef,
    Pending,
    ReceivePayload,
    SendPayload,
    TransferResult,
)

LOOPBACK = "127.0.0.1"
_lock = threading.Lock()
_runs: dict[str, Future[TransferResult]] = {}  # by node and run attempt (NodeRef.stage)
_progress: dict[str, tuple[int, int]] = {}


def _port_file(disk: Path, copy_id: str) -> Path:
    return disk.parent / ".copies" / f"{copy_id}.port"


def _run(disk: Path, payload: SendPayload | ReceivePayload, key: str,
         done: Future[TransferResult]) -> None:
    def report(moved: int, total: int) -> None:
        _progress[key] = (moved, total)

    try:
        if isinstance(payload, ReceivePayload):
            port_file = _port_file(disk, payload.copy_id)

            def address() -> tuple[str, int] | None:
                text = port_file.read_text().strip() if port_file.exists() else ""
                return (LOOPBACK, int(text)) if text.isdigit() else None

            done.set_result(fetch(disk, payload, report, address=address, simulated=True))
        else:
            port_file = _port_file(disk, payload.copy_id)
            port_file.parent.mkdir(parents=True, exist_ok=True)
            disk.mkdir(parents=True, exist_ok=True)
            def listening(port: int) -> None:
                port_file.write_text(str(port))

            done.set_result(serve(disk, payload, report, bind=(LOOPBACK, 0),
                                  listening=listening, simulated=True))
            port_file.unlink(missing_ok=True)
    except BaseException as exc:  # handed to the caller, which reports it
        done.set_exception(exc)


def copy_step(disk: Path, node: NodeRef, payload: SendPayload | ReceivePayload,
              progress: Callable[[int, int], None] | None) -> TransferResult | Pending:
    """The copy's side on this stand-in server: started, still running (Pending), or its
    result. Raises AgentError when it failed."""
    key = f"{node.node_id}/{node.stage}"
    with _lock:
        running = _runs.get(key)
        if running is None:
            running = _runs[key] = Future()
            threading.Thread(target=_run, args=(disk, payload, key, running),
                             name=f"sim-copy-{payload.copy_id[-6:]}", daemon=True).start()
    if not running.done():
        if progress is not None and key in _progress:
            progress(*_progress[key])
        return Pending()
    with _lock:
        _runs.pop(key, None)
        _progress.pop(key, None)
    try:
        return running.result()
    except (CopyError, ValueError, OSError) as exc:
        err = AgentError(str(exc))
        err.retryable = True  # a file written meanwhile, a source not up: again
        raise err from None

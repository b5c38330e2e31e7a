"""What the embedded servers of `gpulease up` (SeaweedFS, docker-registry) share: a free
loopback port, and a child process stopped politely, then firmly."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], grace_s: float = 20) -> None:
    """SIGTERM, and SIGKILL after `grace_s` (what is thrown away anyway, a test's scratch
    server, need not wait for its flush)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)

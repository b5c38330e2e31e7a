"""A live API server on loopback, in a thread of the test's process (its platform shared
with the test), a free loopback port, and the media server a lab server boots from."""

from __future__ import annotations

import http.server
import queue
import shutil
import socket
import threading
import time
from contextlib import suppress
from pathlib import Path
from unittest.mock import MagicMock
from urllib.parse import parse_qs, urlsplit

import uvicorn
from fastapi import FastAPI

from gpulease.api.app import create_app
from gpulease.cli.client import Client
from gpulease.platform import Platform


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    def __init__(self, p: Platform) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(p), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def client(self, token: str | None) -> Client:
        return Client(self.url, token)


def listing_app() -> FastAPI:
    """The app over a stand-in platform: enough to list its routes and its document."""
    platform = MagicMock()
    platform.settings.max_body_bytes = 1 << 20
    return create_app(platform)


class MediaServer(http.server.ThreadingHTTPServer):
    """What a lab server fetches (`/<name>` for each file given), the plan its ramdisk asks
    for (`/plan`) and where it reports (`/report`), on 127.0.0.1, in a thread until
    `close`. Every /plan and /report query is queued as (path, query)."""

    def __init__(self, files: dict[str, Path], port: int = 0, plan: str = "action=none\n"
                 ) -> None:
        self.files = files
        self.plan = plan
        self.heard: queue.Queue[tuple[str, dict[str, str]]] = queue.Queue()
        super().__init__(("127.0.0.1", port), _MediaHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def next_report(self, timeout_s: float) -> dict[str, str]:
        """The next /report's query (the /plan asks before it are skipped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            path, query = self.heard.get(timeout=max(0.1, deadline - time.monotonic()))
            if path == "/report":
                return query

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _MediaHandler(http.server.BaseHTTPRequestHandler):
    server: MediaServer

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        if url.path in ("/plan", "/report"):
            self.server.heard.put((url.path, {k: v[0] for k, v in parse_qs(url.query).items()}))
            body = self.server.plan.encode() if url.path == "/plan" else b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        path = self.server.files.get(url.path.lstrip("/"))
        if path is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        with path.open("rb") as f, suppress(BrokenPipeError, ConnectionResetError):
            shutil.copyfileobj(f, self.wfile, 2**20)  # streamed: images are gigabytes

    def log_message(self, *_args: object) -> None:
        pass

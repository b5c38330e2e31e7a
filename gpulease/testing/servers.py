"""A live API server on loopback, in a thread of the test's process (its platform shared
with the test), and a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from unittest.mock import MagicMock

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

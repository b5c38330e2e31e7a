"""The lab's media server on 127.0.0.1: the files a lab server fetches while it deploys
(the ramdisk ISO, the OS image, the config drive: `/<name>`, streamed), the plan its ramdisk
asks for (`/plan`) and where the ramdisk reports (`/report`). Runs in a thread until
`close`; every /plan and /report query is queued as (path, query)."""

from __future__ import annotations

import http.server
import queue
import shutil
import threading
import time
from contextlib import suppress
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


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

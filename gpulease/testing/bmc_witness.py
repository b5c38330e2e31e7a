"""A witness in front of a BMC: a reverse proxy on 127.0.0.1 that passes each request on as
it came and logs it with the User-Agent that sent it (which names the worker) and, for a
request that changes the server, the claim it names (`X-Gpulease-Claim`). Given a `judge`,
it asks, as each such request arrives and before passing it on, whether that claim is still
held: a change made under a claim no longer held is a late call (bench/crash.py, the fence
tests)."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from gpulease.db.base import Base
from gpulease.db.session import Database
from gpulease.drivers.on_behalf import CLAIM_HEADER, READS
from gpulease.worker.pipelines.fence import claim_label

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class RecordingProxy:
    def __init__(self, target_port: int,
                 judge: Callable[[str], bool] | None = None) -> None:
        self.requests: list[tuple[str, str, str]] = []  # (User-Agent, method, path)
        # (method, path, claim) of every request but reads; claim "" where none was named
        # (an operator's or a tenant's own request, a session's login outside a step)
        self.changes: list[tuple[str, str, str]] = []
        self.late: list[tuple[str, str, str, str]] = []  # (User-Agent, method, path, claim)
        self.failures: list[str] = []  # upstream trouble, retried
        self._judge = judge
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _pass(self) -> None:
                proxy.witness(self.headers.get("User-Agent", ""), self.command, self.path,
                              self.headers.get(CLAIM_HEADER, ""))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                status, headers, data = 502, [], b""
                for _ in range(3):  # bounded: the emulator may drop a connection
                    upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=10)
                    try:
                        upstream.request(self.command, self.path, body=body, headers={
                            k: v for k, v in self.headers.items() if k.lower() not in HOP})
                        answer = upstream.getresponse()
                        status, headers, data = answer.status, answer.getheaders(), answer.read()
                        break
                    except OSError as exc:
                        proxy.failures.append(f"{self.command} {self.path}: {exc!r}")
                    finally:
                        upstream.close()
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in HOP and k.lower() not in ("server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                if self.close_connection:  # the client asked to close: say so, or it reuses
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def witness(self, agent: str, method: str, path: str, claim: str) -> None:
        late = (method not in READS and bool(claim) and self._judge is not None
                and not self._judge(claim))
        with self._lock:
            self.requests.append((agent, method, path))
            if method not in READS:
                self.changes.append((method, path, claim))
            if late:
                self.late.append((agent, method, path, claim))

    def workers(self) -> set[str]:
        """The workers named by the requests' User-Agents."""
        return {ua.rsplit("(worker ", 1)[1].rstrip(")") for ua, _, _ in self.requests
                if "(worker " in ua}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def claim_still_held(db: Database) -> Callable[[str], bool]:
    """A judge for `RecordingProxy`: whether the claim a request names (`table/row/digest`,
    worker/pipelines/fence.py) is still the row's lock, read from the database as the
    request arrives."""
    def judge(label: str) -> bool:
        table_name, _, rest = label.partition("/")
        row_id = rest.rpartition("/")[0]
        table = Base.metadata.tables.get(table_name)
        if table is None or "lock_token" not in table.c:
            return False
        with db.read() as s:
            token = s.scalar(select(table.c.lock_token).where(table.c.id == row_id))
        return token is not None and claim_label(table_name, row_id, token) == label

    return judge

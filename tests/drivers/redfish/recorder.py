"""A recording reverse proxy on 127.0.0.1 in front of a BMC: each request is passed on
as it came and logged with the User-Agent that sent it (which names the worker)."""

from __future__ import annotations

import http.client
import http.server
import threading
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class RecordingProxy:
    def __init__(self, target_port: int) -> None:
        self.requests: list[tuple[str, str, str]] = []  # (User-Agent, method, path)
        self.failures: list[str] = []  # upstream trouble, retried
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _pass(self) -> None:
                proxy.requests.append((self.headers.get("User-Agent", ""), self.command,
                                       self.path))
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

    def workers(self) -> set[str]:
        """The workers named by the requests' User-Agents."""
        return {ua.rsplit("(worker ", 1)[1].rstrip(")") for ua, _, _ in self.requests
                if "(worker " in ua}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

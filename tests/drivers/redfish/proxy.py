"""A fault-injecting TCP proxy on 127.0.0.1 in front of a BMC: pass, delay, drop the
connection, or answer HTTP 500 (or 503 with Retry-After: 5), switchable while running. The
mode applies per request chunk, so a kept-alive connection is affected too."""

from __future__ import annotations

import select
import socket
import threading
import time

ERROR_500 = (b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
             b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
BUSY_503 = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 5\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")


class FaultProxy:
    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target = ("127.0.0.1", target_port)
        self.mode = "pass"  # pass | delay | drop | 500 | 503 (with Retry-After: 5)
        self.delay_s = 0.0
        self.faults_left: int | None = None  # None: the mode holds until changed
        self.seen = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, mode: str, times: int | None = None, delay_s: float = 0.0) -> None:
        with self._lock:
            self.mode, self.faults_left, self.delay_s = mode, times, delay_s

    def _take_mode(self) -> str:
        with self._lock:
            self.seen += 1
            mode = self.mode
            if mode != "pass" and self.faults_left is not None:
                self.faults_left -= 1
                if self.faults_left <= 0:
                    self.mode, self.faults_left = "pass", None
            return mode

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            upstream = socket.create_connection(self.target, timeout=5)
            for _ in range(100_000):  # bounded: a test connection is short-lived
                if self._stop.is_set():
                    return
                ready, _, _ = select.select([client, upstream], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        mode = self._take_mode()
                        if mode == "drop":
                            return
                        if mode in ("500", "503"):
                            client.sendall(ERROR_500 if mode == "500" else BUSY_503)
                            return
                        if mode == "delay":
                            time.sleep(self.delay_s)
                        upstream.sendall(data)
                    else:
                        client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            if upstream is not None:
                upstream.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

"""The agent's HTTP endpoint: /metrics for Prometheus, /healthz, and JSON views of the
current window (summaries, alerts, inventory). Standard library server: the agent must
stay small on the node and must not pull in the control plane's web stack."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from gpulease.agent.gpu.backend import GpuBackend
from gpulease.agent.gpu.metrics import CONTENT_TYPE, Host, render
from gpulease.agent.gpu.sampler import Sampler
from gpulease.domain.fleet.telemetry import alerts_for


class AgentState:
    """What the endpoint serves: the backend, its sampler and the host name."""

    def __init__(self, backend: GpuBackend, sampler: Sampler, hostname: str | None = None,
                 backend_name: str = "nvml") -> None:
        self.backend, self.sampler = backend, sampler
        self.hostname = hostname or socket.gethostname()
        self.backend_name = "simulated" if backend.simulated else backend_name
        self.driver_version = backend.driver_version()
        self.cuda_version = backend.cuda_version()
        self.bus_ids = {g.index: g.pci_bus_id for g in backend.devices() if g.pci_bus_id}

    def metrics_text(self) -> str:
        host = Host(self.hostname, self.backend_name, self.driver_version, self.cuda_version,
                    self.bus_ids)
        return render(self.sampler.latest(), host, self.sampler.last_sweep_s)

    def summary(self, seconds: float | None) -> dict[str, Any]:
        summaries = self.sampler.summaries(seconds)
        return {"hostname": self.hostname, "simulated": self.backend.simulated,
                "gpus": [s.as_dict() for s in summaries],
                "alerts": [a.as_dict() for a in alerts_for(summaries)]}

    def inventory(self) -> dict[str, Any]:
        from gpulease.agent.inventory import host_inventory

        return host_inventory(self.backend)


def _handler(state: AgentState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpulease-agent"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # Prometheus scrapes every few seconds; access logs would drown the journal

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, data: Any, status: int = 200) -> None:
            self._send(status, json.dumps(data, default=str).encode(), "application/json")

        def do_GET(self) -> None:  # the http.server interface
            url = urlparse(self.path)
            if url.path == "/metrics":
                self._send(200, state.metrics_text().encode(), CONTENT_TYPE)
            elif url.path == "/healthz":
                self._json({"ok": True, "simulated": state.backend.simulated,
                            "gpus": len(state.sampler.latest())})
            elif url.path == "/v1/summary":
                seconds = parse_qs(url.query).get("seconds", [None])[0]
                try:
                    window = float(seconds) if seconds is not None else None
                except ValueError:
                    self._json({"detail": "seconds must be a number"}, 400)
                    return
                self._json(state.summary(window))
            elif url.path == "/v1/inventory":
                self._json(state.inventory())
            elif url.path == "/v1/gpus":
                self._json([asdict(g) for g in state.backend.devices()])
            else:
                self._json({"detail": f"no such path {url.path}; try /metrics"}, 404)

    return Handler


class AgentServer:
    def __init__(self, state: AgentState, host: str, port: int) -> None:
        self.state = state
        self.httpd = ThreadingHTTPServer((host, port), _handler(state))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                        name="agent-http")
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

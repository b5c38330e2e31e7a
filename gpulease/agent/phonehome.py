"""Phone home: trade the one-time token for a node credential, then push a summary of the
last window at a fixed interval. A control plane that is down is retried at the next
interval; telemetry at /metrics never depends on it."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import httpx

from gpulease.agent.server import AgentState

log = logging.getLogger("gpulease.agent")


class PhoneHome:
    def __init__(self, url: str, state: AgentState, credential_file: Path,
                 enroll_token_file: Path | None, interval_s: float = 60.0,
                 listen_port: int | None = None, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.state, self.interval_s = state, interval_s
        self.credential_file, self.enroll_token_file = credential_file, enroll_token_file
        self.listen_port = listen_port
        self.client = httpx.Client(timeout=timeout_s)
        self.pushes = 0
        self.last_alerts: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def credential(self) -> str | None:
        if self.credential_file.exists():
            return self.credential_file.read_text().strip() or None
        return None

    def register(self) -> str:
        if self.enroll_token_file is None or not self.enroll_token_file.exists():
            raise RuntimeError("no credential yet and no enrollment token file; pass "
                               "--enroll-token-file (the config drive's agent token)")
        token = self.enroll_token_file.read_text().strip()
        address = f"{self.state.hostname}:{self.listen_port}" if self.listen_port else None
        resp = self.client.post(f"{self.url}/api/v1/agent/register", json={
            "token": token, "hostname": self.state.hostname, "address": address,
            "inventory": self.state.inventory()})
        if resp.status_code != 201:
            raise RuntimeError(f"enrollment refused ({resp.status_code}): "
                               f"{resp.json().get('detail', resp.text)}")
        credential: str = resp.json()["credential"]
        self.credential_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.credential_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(credential)
        return credential

    def push(self) -> list[dict[str, Any]]:
        credential = self.credential() or self.register()
        summary = self.state.summary(self.interval_s)
        resp = self.client.post(f"{self.url}/api/v1/agent/telemetry",
                                json={"gpus": summary["gpus"]},
                                headers={"Authorization": f"Bearer {credential}"})
        if resp.status_code != 202:
            raise RuntimeError(f"telemetry refused ({resp.status_code}): "
                               f"{resp.json().get('detail', resp.text)}")
        self.pushes += 1
        self.last_alerts = resp.json()["alerts"]
        return self.last_alerts

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.push()
            except (httpx.HTTPError, RuntimeError, OSError) as exc:
                log.warning("phone home to %s failed: %s", self.url, exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="phone-home", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self.client.close()

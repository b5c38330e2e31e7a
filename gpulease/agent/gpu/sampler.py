"""Samples every GPU at a fixed interval into a rolling window (one thread per agent)."""

from __future__ import annotations

import logging
import threading
import time

from gpulease.agent.gpu.backend import GpuBackend
from gpulease.domain.fleet.telemetry import GpuSample, GpuSummary, SampleWindow, summarize

log = logging.getLogger("gpulease.agent")


class Sampler:
    def __init__(self, backend: GpuBackend, interval_s: float = 1.0,
                 window_s: float = 300.0) -> None:
        self.backend, self.interval_s = backend, interval_s
        self.window = SampleWindow(window_s)
        self.last_sweep_s: float | None = None  # wall time of the last sweep (on /metrics)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> list[GpuSample]:
        wall = time.perf_counter()
        batch = self.backend.sample()
        self.last_sweep_s = time.perf_counter() - wall
        with self._lock:
            self.window.add(batch)
        return batch

    def latest(self) -> list[GpuSample]:
        with self._lock:
            return self.window.latest()

    def summaries(self, seconds: float | None = None) -> list[GpuSummary]:
        with self._lock:
            samples = list(self.window.samples)
        if seconds is not None and samples:
            cutoff = samples[-1].at - seconds
            samples = [s for s in samples if s.at >= cutoff]
        return summarize(samples)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sweep()
            except Exception as exc:  # one failed sweep must not stop telemetry
                log.warning("GPU sample sweep failed: %s", exc)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> None:
        self.sweep()  # the first page is never empty
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

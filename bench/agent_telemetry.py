"""Node agent and telemetry costs. Prints JSON:

- agent: CPU time of one sample sweep of 8 simulated GPUs (the agent samples at 1 Hz, so
  CPU per sweep / 1 s is its CPU share), and the cost of summarizing a 5-minute window;
- scrape: GET /metrics over real HTTP (keep-alive) against the agent's own server, beside
  rendering the page alone;
- ingest: control-plane telemetry ingest (one push = 8 GPU summaries, as an agent sends it)
  in summaries per second, beside a raw INSERT of the same rows through the same engine in
  the same run, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from sqlalchemy import select, text

from bench._common import bench_platform, free_port, summary_ms
from gpulease.agent.gpu.metrics import Host, render
from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import SimulatedGpus, VirtualClock
from gpulease.agent.server import AgentServer, AgentState
from gpulease.db.tables import Node
from gpulease.demo import seed_demo_fleet
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.telemetry import pushes

SWEEPS = 600
SCRAPES = 500
PUSHES = 300


def agent_sweeps() -> dict[str, object]:
    gpus = SimulatedGpus(8)
    gpus.load = 0.8
    sampler = Sampler(gpus, window_s=300)
    cpu = []
    for _ in range(SWEEPS):
        t = time.thread_time()
        sampler.sweep()
        cpu.append(time.thread_time() - t)
    window = SimulatedGpus(8, clock=VirtualClock())
    ws = Sampler(window, window_s=300)
    for _ in range(300):
        ws.sweep()
        window.clock.advance(1.0)  # type: ignore[attr-defined]
    t = time.thread_time()
    for _ in range(20):
        ws.summaries()
    summarize_s = (time.thread_time() - t) / 20
    per_sweep = sum(cpu) / len(cpu)
    return {"gpus": 8, "sweeps": SWEEPS, "cpu_per_sweep": summary_ms(cpu),
            "cpu_share_at_1hz_percent": round(per_sweep * 100, 4),
            "summarize_5min_window_ms": round(summarize_s * 1000, 3)}


def scrape() -> dict[str, object]:
    gpus = SimulatedGpus(8)
    sampler = Sampler(gpus)
    sampler.sweep()
    state = AgentState(gpus, sampler, "bench-node", backend_name="simulated")
    render_s = []
    for _ in range(SCRAPES):
        t = time.perf_counter()
        render(sampler.latest(), Host("bench-node", "simulated"))
        render_s.append(time.perf_counter() - t)
    server = AgentServer(state, "127.0.0.1", free_port())
    server.start()
    try:
        http_s = []
        size = 0
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}") as client:
            client.get("/metrics")
            for _ in range(SCRAPES):
                t = time.perf_counter()
                size = len(client.get("/metrics").content)
                http_s.append(time.perf_counter() - t)
    finally:
        server.stop()
    return {"scrape_http": summary_ms(http_s), "render_only": summary_ms(render_s),
            "page_bytes": size}


def ingest(db: str) -> dict[str, object]:
    with bench_platform(db) as p:
        seed_demo_fleet(p, 1)
        with p.db.write() as s:
            node_id = s.scalars(select(Node.id)).first()
            assert node_id is not None
            token = agent_credentials.mint_enrollment(s, node_id, None, p.clock.now())
        _, credential = agent_credentials.register(p, token, "bench", None, None)
        gpus = SimulatedGpus(8, clock=VirtualClock())
        sampler = Sampler(gpus)
        for _ in range(60):
            sampler.sweep()
            gpus.clock.advance(1.0)  # type: ignore[attr-defined]
        window = [g.as_dict() for g in sampler.summaries()]
        pushes.ingest(p, credential, window)  # warm
        t = time.perf_counter()
        for _ in range(PUSHES):
            pushes.ingest(p, credential, window)
        ingest_s = time.perf_counter() - t
        rows = [{"node_id": node_id, "gpu_index": g["index"], "gpu_uuid": g["uuid"],
                 "summary_json": json.dumps(g)} for g in window]
        with p.db.write() as s:
            s.execute(text("CREATE TABLE bench_raw (node_id VARCHAR(32), gpu_index INTEGER, "
                           "gpu_uuid VARCHAR(80), summary_json TEXT)"))
        t = time.perf_counter()
        for _ in range(PUSHES):
            with p.db.write() as s:
                s.execute(text("INSERT INTO bench_raw VALUES (:node_id, :gpu_index, "
                               ":gpu_uuid, :summary_json)"), rows)
        raw_s = time.perf_counter() - t
        n = PUSHES * len(window)
        return {"pushes": PUSHES, "summaries_per_push": len(window),
                "ingest_summaries_per_s": round(n / ingest_s, 1),
                "ingest_push_ms": round(ingest_s / PUSHES * 1000, 3),
                "raw_insert_summaries_per_s": round(n / raw_s, 1),
                "raw_insert_push_ms": round(raw_s / PUSHES * 1000, 3),
                "ingest_vs_raw_time_ratio": round(ingest_s / raw_s, 2)}


def main() -> None:
    print(json.dumps({"bench": "agent_telemetry", "agent": agent_sweeps(), "scrape": scrape(),
                      "ingest": {db: ingest(db) for db in ("sqlite", "postgresql")}},
                     indent=2))


if __name__ == "__main__":
    main()

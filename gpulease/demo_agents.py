"""Stand-ins for the node agents of the demo's simulated servers: every `interval_s` each
active simulated node's GPUs are sampled (simulated backend, with the node's injected GPU
faults) and a summary goes through the same enrollment and ingest path a real agent's push
takes. Every summary says simulated."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import select

from gpulease.agent.gpu.sampler import Sampler
from gpulease.agent.gpu.simulated import MODELS, SimulatedGpus, VirtualClock, parse_faults
from gpulease.db.tables import Node
from gpulease.domain.errors import Unauthorized
from gpulease.domain.states import NodeStatus
from gpulease.platform import Platform
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.agents.node_agent import is_simulated
from gpulease.services.telemetry import pushes

log = logging.getLogger("gpulease.demo")


class DemoAgents:
    def __init__(self, p: Platform, interval_s: float = 10.0) -> None:
        self.p, self.interval_s = p, interval_s
        self._credentials: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _faults(self, node: Node) -> list[str]:
        fleet = self.p.drivers.fleet
        if node.bmc_driver == "simulated" and fleet is not None:
            return list(fleet.snapshot(node.name).get("gpu_faults", []))
        agent = self.p.drivers.agents.get(node.bmc_driver)
        return list(getattr(agent, "gpu_faults", {}).get(node.name, []))

    def _credential(self, node: Node) -> str:
        if node.id not in self._credentials:
            with self.p.db.write() as s:
                token = agent_credentials.mint_enrollment(s, node.id, node.instance_id,
                                                          self.p.clock.now())
            _, self._credentials[node.id] = agent_credentials.register(
                self.p, token, node.name, None, {"simulated_gpus": True})
        return self._credentials[node.id]

    def tick(self) -> int:
        """One push per active simulated node; returns how many were pushed."""
        with self.p.db.read() as s:
            active = select(Node).where(Node.status == NodeStatus.ACTIVE.value)
            nodes = [n for n in s.scalars(active)
                     if n.agent_kind == "builtin"
                     and is_simulated(self.p, n.bmc_driver, n.agent_kind)]
            s.expunge_all()
        for node in nodes:
            sku = self.p.catalog.sku_by_id.get(node.sku)
            model = sku.gpu if sku and sku.gpu in MODELS else "h100-80g"
            seconds = max(int(self.interval_s), 1)
            gpus = SimulatedGpus(count=sku.gpu_count if sku else 8, model=model,
                                 faults=parse_faults(self._faults(node)),
                                 clock=VirtualClock(time.time() - seconds),
                                 hostname_seed=node.name)
            gpus.load = 0.7
            sampler = Sampler(gpus, window_s=seconds + 1)
            for _ in range(seconds):
                sampler.sweep()
                gpus.clock.advance(1.0)  # type: ignore[attr-defined]
            summaries = [g.as_dict() for g in sampler.summaries()]
            try:
                pushes.ingest(self.p, self._credential(node), summaries)
            except Unauthorized:  # redeployed since: like a new OS's agent, enroll again
                self._credentials.pop(node.id, None)
                pushes.ingest(self.p, self._credential(node), summaries)
        return len(nodes)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception as exc:  # the demo's telemetry must never stop the platform
                log.warning("demo telemetry: %s", exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-agents", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

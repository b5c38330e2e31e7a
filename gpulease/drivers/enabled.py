"""The drivers a process enabled, by interface, built from its settings.

Every process gets the real ones: Redfish for BMCs (sushy), Docker engines for shared
hosts. The simulated BMC, the stand-in agents and the simulated container hosts of the demo
fleet exist only where `GPULEASE_SIMULATED_HARDWARE` is on (`gpulease up`, the tests, the
benches): in production a node enrolled with a simulated BMC, or a builtin agent, fails its
steps saying that no such driver is enabled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpulease.drivers.redfish import RedfishDriver
from gpulease.drivers.simulated import (
    BmcWatchingAgent,
    SimulatedAgent,
    SimulatedFleet,
    SimulatedRuntime,
)
from gpulease.ports.agent import Agent
from gpulease.ports.bmc import Bmc, BmcEndpoint
from gpulease.ports.runtime import ContainerRuntime
from gpulease.settings import Settings

BmcFactory = Callable[[BmcEndpoint], Bmc]


@dataclass
class Drivers:
    """Drivers by interface; BMC drivers in a typed registry keyed by the node's bmc_driver."""

    bmc: dict[str, BmcFactory]
    agents: dict[str, Agent]  # stand-in agents by the node's bmc_driver (agent_kind builtin)
    runtime: ContainerRuntime | None = None  # shared hosts without an engine URL (the demo's)
    fleet: SimulatedFleet | None = None  # the simulated servers' state (demo and tests)
    docker: ContainerRuntime | None = None  # shared hosts with a Docker engine URL

    def runtime_for(self, engine_url: str | None) -> ContainerRuntime:
        if engine_url:
            if self.docker is None:
                raise LookupError("no Docker runtime configured for hosts with an engine URL")
            return self.docker
        if self.runtime is None:
            raise LookupError("this host has no Docker engine URL and simulated hardware is "
                              "off (GPULEASE_SIMULATED_HARDWARE): set the host's engine URL")
        return self.runtime

    def agent_for(self, driver: str) -> Agent:
        try:
            return self.agents[driver]
        except KeyError:
            raise LookupError(f"no stand-in agent for BMC driver {driver!r}: builtin agents "
                              "are simulated hardware (GPULEASE_SIMULATED_HARDWARE); a real "
                              "server runs `gpulease agent`") from None

    def bmc_for(self, driver: str, endpoint: BmcEndpoint) -> Bmc:
        try:
            factory = self.bmc[driver]
        except KeyError:
            raise LookupError(
                f"no BMC driver {driver!r} enabled; enabled: {', '.join(sorted(self.bmc))}"
                + (" (simulated BMCs need GPULEASE_SIMULATED_HARDWARE=true)"
                   if driver == "simulated" else "")) from None
        return factory(endpoint)


def simulated_drivers(state_dir: Path, delay_s: float, latency_s: float = 0.0,
                      redfish: RedfishDriver | None = None,
                      boot_server: Callable[[], str] | None = None) -> Drivers:
    """The demo's drivers: simulated BMC, agent and runtime; real Redfish BMCs work beside
    them (a node's bmc_driver picks which)."""
    fleet = SimulatedFleet(state_dir, delay_s, latency_s=latency_s)
    redfish = redfish or RedfishDriver()
    return Drivers(
        bmc={"simulated": fleet.bmc, "redfish": redfish.bmc},
        agents={"simulated": SimulatedAgent(fleet),
                "redfish": BmcWatchingAgent(redfish.bmc, boot_delay_s=delay_s,
                                            boot_server=boot_server,
                                            disks_dir=fleet.state_dir / "disks")},
        runtime=SimulatedRuntime(fleet),
        fleet=fleet,
    )


def drivers_for(settings: Settings) -> Drivers:
    """What `settings` enable: Redfish and Docker always, the simulated hardware with
    GPULEASE_SIMULATED_HARDWARE."""
    redfish = RedfishDriver(settings.bmc_timeout_s, settings.bmc_verify_tls)
    if settings.simulated_hardware:
        drivers = simulated_drivers(settings.data_dir / "simulated", settings.demo_delay_s,
                                    settings.demo_call_latency_s, redfish,
                                    boot_server=lambda: settings.public_url)
    else:
        drivers = Drivers(bmc={"redfish": redfish.bmc}, agents={})
    from gpulease.drivers.docker_runtime import DockerRuntime  # docker off the start-up path

    drivers.docker = DockerRuntime(settings.container_image, settings.container_gpus,
                                   settings.bmc_timeout_s, settings.docker_tls_dir)
    return drivers

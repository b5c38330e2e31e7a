"""Drivers built from settings: the real ones always, the demo's simulated hardware only
where GPULEASE_SIMULATED_HARDWARE is on."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.drivers.enabled import drivers_for
from gpulease.ports.bmc import BmcEndpoint
from gpulease.settings import Settings


def test_a_production_process_builds_no_simulated_hardware(tmp_path: Path) -> None:
    drivers = drivers_for(Settings(data_dir=tmp_path))
    assert set(drivers.bmc) == {"redfish"}
    assert drivers.agents == {} and drivers.fleet is None and drivers.runtime is None
    assert drivers.docker is not None
    assert not (tmp_path / "simulated").exists()  # nothing of the demo's state made
    endpoint = BmcEndpoint("n1", "https://bmc.example", "root", "pw")
    with pytest.raises(LookupError, match="GPULEASE_SIMULATED_HARDWARE"):
        drivers.bmc_for("simulated", endpoint)
    with pytest.raises(LookupError, match="gpulease agent"):
        drivers.agent_for("redfish")
    with pytest.raises(LookupError, match="engine URL"):
        drivers.runtime_for(None)


def test_the_demo_builds_the_simulated_hardware_beside_the_real(tmp_path: Path) -> None:
    drivers = drivers_for(Settings(data_dir=tmp_path, simulated_hardware=True))
    assert set(drivers.bmc) == {"redfish", "simulated"}
    assert set(drivers.agents) == {"redfish", "simulated"}
    assert drivers.fleet is not None and drivers.runtime is not None
    assert drivers.docker is not None

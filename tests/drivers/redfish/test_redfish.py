"""The Redfish BMC driver against a real Redfish peer (sushy-tools emulator)."""

from __future__ import annotations

import time

import pytest

from gpulease.drivers.redfish import RedfishDriver, split_address
from gpulease.drivers.redfish_emulator import Emulator
from gpulease.ports.bmc import (
    BmcEndpoint,
    BmcPermanentError,
    BmcTransientError,
    BootDevice,
    PowerState,
)
from gpulease.testing.servers import free_port
from tests.fixtures.redfish import PASSWORD, USER

pytestmark = pytest.mark.slow


def bmc(emu: Emulator, i: int = 0, password: str = PASSWORD):  # type: ignore[no-untyped-def]
    return RedfishDriver(timeout_s=5).bmc(
        BmcEndpoint(f"node-{i}", emu.system_url(i), USER, password))


def wait_power(b, target: PowerState, deadline_s: float = 20) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        if b.power_state() == target:
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"power did not reach {target} in {deadline_s} s")


def test_power_changes_land_after_a_delay_and_are_polled(emulator: Emulator) -> None:
    b = bmc(emulator)
    assert b.power_state() == PowerState.OFF
    b.power_on()
    b.power_on()  # repeating a request is harmless
    wait_power(b, PowerState.ON)
    system = f"/redfish/v1/Systems/{emulator.systems[0]}"
    assert emulator.get(system)["PowerState"] == "On"
    b.power_off()
    wait_power(b, PowerState.OFF)
    assert emulator.get(system)["PowerState"] == "Off"  # the BMC agrees with the driver


def test_a_running_server_is_restarted_gracefully_or_at_once(emulator: Emulator) -> None:
    """A tenant's reboot and power cycle (GracefulRestart, ForceRestart) are reset actions
    the BMC accepts on a running server; it is on again after each."""
    b = bmc(emulator)
    b.power_on()
    wait_power(b, PowerState.ON)
    b.graceful_restart()
    wait_power(b, PowerState.ON)
    b.force_restart()
    wait_power(b, PowerState.ON)


def test_one_time_boot_and_virtual_media(emulator: Emulator, image_server: str) -> None:
    b = bmc(emulator)
    b.set_one_time_boot(BootDevice.VIRTUAL_CD)
    boot = emulator.get(f"/redfish/v1/Systems/{emulator.systems[0]}")["Boot"]
    assert boot["BootSourceOverrideTarget"] == "Cd"
    url = f"{image_server}/ubuntu22.04-cuda12.4-pytorch2.5.iso"
    b.insert_media(url)
    b.insert_media(url)  # re-inserting replaces, no error
    assert b.inserted_media() == url
    cd = emulator.get(f"/redfish/v1/Systems/{emulator.systems[0]}/VirtualMedia/Cd")
    assert cd["Inserted"] is True and cd["Image"] == url
    b.eject_media()
    b.eject_media()  # ejecting an empty drive is harmless
    assert b.inserted_media() is None


def test_an_unreachable_image_is_a_permanent_error_with_the_bmcs_message(
    emulator: Emulator, image_server: str
) -> None:
    with pytest.raises(BmcPermanentError, match="Cannot download virtual media"):
        bmc(emulator).insert_media(f"{image_server}/no-such-image.iso")


def test_wrong_password_is_permanent(emulator: Emulator) -> None:
    with pytest.raises(BmcPermanentError, match="refused the credentials|401"):
        bmc(emulator, password="wrong").power_state()


def test_stopped_bmc_is_transient(emulator: Emulator) -> None:
    b = bmc(emulator)
    assert b.power_state() == PowerState.OFF
    emulator.stop()
    with pytest.raises(BmcTransientError, match="unreachable"):
        b.power_state()
    nobody = RedfishDriver(timeout_s=2).bmc(BmcEndpoint(
        "x", f"http://127.0.0.1:{free_port()}/redfish/v1/Systems/1", USER, PASSWORD))
    with pytest.raises(BmcTransientError):
        nobody.power_state()


def test_inventory_reports_what_the_bmc_offers_and_unknown_for_the_rest(
    emulator: Emulator,
) -> None:
    inv = bmc(emulator, 1).inventory()
    assert inv.system_id == emulator.systems[1]
    assert inv.manufacturer == "Sushy Emulator"
    assert inv.nic_macs == ("00:5c:52:01:00:02",)
    assert inv.processor_count is None and "processors" in inv.unknown
    assert inv.drives is None and "storage" in inv.unknown


def test_addresses_are_checked() -> None:
    assert split_address("https://10.0.0.5/redfish/v1/Systems/1") == (
        "https://10.0.0.5/redfish/v1", "/redfish/v1/Systems/1")
    assert split_address("https://10.0.0.5") == ("https://10.0.0.5/redfish/v1", None)
    with pytest.raises(BmcPermanentError, match="not an http"):
        split_address("ipmi://10.0.0.5")

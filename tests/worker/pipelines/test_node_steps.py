"""What each node stage asks of the hardware, on the simulated servers: every stage of a
deploy, a clean and a return from repair has its step; power is requested once and then
polled; the media and the one-time boot are set for the image (or the network); the erase
hands back its certificates."""

from __future__ import annotations

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.domain.states import CLEAN_ORDER, DEPLOY_ORDER, IMAGE_DEPLOY_ORDER, RETURN_ORDER
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint
from gpulease.testing.factories import sim
from gpulease.worker.pipelines.node_steps import STEPS, Outcome, StepInput


def _input(stage: str, node: str, **kw: object) -> StepInput:
    values: dict[str, object] = dict(
        node_id=node, node_name=node, stage=stage, bmc_driver="simulated",
        endpoint=BmcEndpoint(node, f"simulated://{node}", "", ""), instance_id="i-test",
        image_url="https://images.example/ubuntu.iso", agent_media_url="", ssh_keys=(),
        root_password="", hostname=node)
    values.update(kw)
    return StepInput(**values)  # type: ignore[arg-type]


def _node(p: Platform) -> str:
    with p.db.read() as s:
        name = s.scalar(select(Node.name).where(Node.bmc_driver == "simulated").limit(1))
    assert name is not None
    return name


def test_every_stage_has_its_step() -> None:
    assert {*DEPLOY_ORDER, *IMAGE_DEPLOY_ORDER, *CLEAN_ORDER, *RETURN_ORDER} == set(STEPS)


def test_power_is_requested_once_then_polled_until_it_lands(fleet: Platform) -> None:
    node = _node(fleet)
    sim(fleet).delay_s = 3600.0  # the power lands in an hour: the step must wait for it
    assert sim(fleet).snapshot(node)["power"] == "off"
    assert STEPS["power_off"](fleet, _input("power_off", node)).outcome is Outcome.ADVANCE
    first = STEPS["power_on"](fleet, _input("power_on", node))
    assert first.outcome is Outcome.WAIT and first.requested
    polled = STEPS["power_on"](fleet, _input("power_on", node, requests=1, polls=1))
    assert polled.outcome is Outcome.WAIT and not polled.requested  # asked once only
    assert sim(fleet).snapshot(node)["power_target"] == "on"


def test_the_image_goes_in_as_virtual_media_with_a_one_time_boot(fleet: Platform) -> None:
    node = _node(fleet)
    result = STEPS["attach_media"](fleet, _input(
        "attach_media", node, config_drive_url="http://127.0.0.1/media/config/x.iso"))
    assert result.outcome is Outcome.ADVANCE
    state = sim(fleet).snapshot(node)
    assert state["media"] == "https://images.example/ubuntu.iso"
    assert state["usb"] == "http://127.0.0.1/media/config/x.iso"
    assert state["boot_override"] == "cd"


def test_a_network_boot_sets_pxe_and_keeps_the_seed_on_usb(fleet: Platform) -> None:
    node = _node(fleet)
    result = STEPS["attach_media"](fleet, _input(
        "attach_media", node, boot="pxe", config_drive_url="http://127.0.0.1/seed.iso"))
    assert result.outcome is Outcome.ADVANCE and "PXE" in str(result.note)
    state = sim(fleet).snapshot(node)
    assert state["boot_override"] == "pxe" and state["media"] is None


def test_the_erase_hands_back_a_certificate_per_disk(fleet: Platform) -> None:
    node = _node(fleet)
    ramdisk = _input("clean_attach_media", node, agent_media_url="http://127.0.0.1/ramdisk.iso")
    assert STEPS["clean_attach_media"](fleet, ramdisk).outcome is Outcome.ADVANCE
    assert STEPS["power_on"](fleet, _input("power_on", node)).outcome is Outcome.ADVANCE
    assert STEPS["wait_agent"](fleet, _input("wait_agent", node)).outcome is Outcome.ADVANCE
    result = STEPS["erase"](fleet, _input("erase", node))
    assert result.outcome is Outcome.ADVANCE
    assert result.certificates and all(c["passed"] for c in result.certificates)
    assert "erased" in str(result.note)

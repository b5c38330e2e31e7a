"""Virtual media wherever the vendor keeps it, inserted as it asks, over HTTP on 127.0.0.1:
iDRAC 6.x's drives under the System; an AMI BMC's InsertMedia with the TransferProtocolType
its ActionInfo lists; OpenBMC's https-only single slot refusing an http:// image before
anything is sent. Enrollment finds what would fail: the protocol the platform serves media
over, and one slot for an installer's two media."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpulease.domain.catalog import load_catalog
from gpulease.domain.fleet.enrollment import Facts, compare
from gpulease.drivers.redfish import RedfishDriver
from gpulease.ports.bmc import BmcEndpoint, BmcPermanentError, MediaSlot
from tests.drivers.redfish.media_bmc import SYSTEM, MediaBmc

H100 = load_catalog().offer_by_id["h100-80g-x8@ningxia-1"]
IMAGE = "http://127.0.0.1:9/media/ubuntu.iso"


@pytest.fixture
def vendor(request: pytest.FixtureRequest) -> Iterator[MediaBmc]:
    bmc = MediaBmc(request.param)
    yield bmc
    bmc.stop()


def _bmc(server: MediaBmc):  # type: ignore[no-untyped-def]
    return RedfishDriver(timeout_s=5).bmc(BmcEndpoint("xe", f"{server.url}{SYSTEM}", "u", "p"))


@pytest.mark.parametrize("vendor", ["dell6"], indirect=True)
def test_idrac_6_keeps_its_drives_under_the_system(vendor: MediaBmc) -> None:
    bmc = _bmc(vendor)
    bmc.insert_media(IMAGE)
    assert vendor.drive("1")["Image"] == IMAGE and bmc.inserted_media() == IMAGE
    bmc.insert_media(IMAGE + "?drive", MediaSlot.USB)
    assert vendor.drive("2")["Image"] == IMAGE + "?drive"
    (path, body), *_ = vendor.posts
    assert path.startswith(f"{SYSTEM}/VirtualMedia/1/") and "TransferProtocolType" not in body
    bmc.eject_media()
    assert not vendor.drive("1")["Inserted"] and not vendor.drive("2")["Inserted"]
    media = bmc.inventory()
    assert media.virtual_media == ("CD", "DVD", "USBStick") and media.media_one_slot is False
    assert media.media_protocols is None


@pytest.mark.parametrize("vendor", ["ami"], indirect=True)
def test_an_ami_bmc_is_sent_the_protocol_its_action_info_lists(vendor: MediaBmc) -> None:
    bmc = _bmc(vendor)
    bmc.insert_media(IMAGE)
    (_, body), = vendor.posts
    assert body["TransferProtocolType"] == "HTTP" and vendor.drive("CD1")["Image"] == IMAGE
    assert bmc.inventory().media_protocols == ("CIFS", "HTTP", "HTTPS", "NFS")


@pytest.mark.parametrize("vendor", ["openbmc"], indirect=True)
def test_openbmc_takes_https_only_and_has_one_slot(vendor: MediaBmc) -> None:
    bmc = _bmc(vendor)
    with pytest.raises(BmcPermanentError, match="only over HTTPS or CIFS, not HTTP: serve"):
        bmc.insert_media(IMAGE)
    assert vendor.posts == []  # refused before anything was sent
    secure = IMAGE.replace("http://", "https://")
    bmc.insert_media(secure)
    assert vendor.posts[-1][1]["TransferProtocolType"] == "HTTPS"
    assert vendor.drive("Slot_0")["Image"] == secure
    inv = bmc.inventory()
    assert inv.media_one_slot is True and inv.media_protocols == ("HTTPS", "CIFS")


def test_enrollment_names_what_a_deploy_would_meet() -> None:
    base = Facts(2048.0, 2, None, None, virtual_media=("CD", "USBStick"))
    openbmc = compare(H100, Facts(2048.0, 2, None, None, virtual_media=("CD", "USBStick"),
                                  media_one_slot=True, media_protocols=("HTTPS", "CIFS"),
                                  media_scheme="http"))
    assert not openbmc.matches
    assert any("one virtual drive takes both CD and USB media" in d
               for d in openbmc.differences)
    assert any("only over HTTPS or CIFS, and this platform serves it over HTTP: serve it "
               "over https" in d for d in openbmc.differences)
    image = H100.model_copy(update={"deploy": "image"})  # the config drive follows the ramdisk
    secure = compare(image, Facts(2048.0, 2, None, None, virtual_media=("CD", "USBStick"),
                                  media_one_slot=True, media_protocols=("HTTPS", "CIFS"),
                                  media_scheme="https"))
    assert secure.matches and "virtual media" in secure.checked
    silent = compare(H100, Facts(2048.0, 2, None, None, virtual_media=("CD", "USBStick"),
                                 media_scheme="http"))
    assert "virtual media protocol" in silent.unchecked
    assert compare(H100, base).matches


def test_an_insert_the_bmc_runs_as_a_task_is_followed_to_its_end() -> None:
    """A 202 with a task monitor: the call returns once the monitor says done (the drive
    is mounted by then), and a task that ends in Exception is the call's error, with the
    BMC's words."""
    done = MediaBmc("dell6", tasks=True)
    try:
        _bmc(done).insert_media(IMAGE)
        assert done.monitor_gets == 3 and done.drive("1")["Image"] == IMAGE
    finally:
        done.stop()
    failing = MediaBmc("dell6", tasks=True, task_fails=True)
    try:
        with pytest.raises(BmcPermanentError, match="ended Exception: Unable to mount"):
            _bmc(failing).insert_media(IMAGE)
        assert failing.drive("1")["Inserted"] is False
    finally:
        failing.stop()

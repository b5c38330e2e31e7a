from __future__ import annotations

import tomllib
from decimal import Decimal
from pathlib import Path

import pytest

from gpulease.domain.catalog import DEFAULT_CATALOG, CatalogError, load_catalog, parse_catalog
from gpulease.services.catalog.offers import day_price, year_price


def raw() -> dict:
    return tomllib.loads(DEFAULT_CATALOG.read_text())


def test_default_catalog_has_the_products_offers_and_prices() -> None:
    c = load_catalog()
    expected = {
        ("rtx4090-24g-x8", "sichuan-2"): ("7920", "9900"),
        ("rtx4090-48g-x8", "sichuan-3"): ("9600", "12000"),
        ("h100-80g-x8", "ningxia-1"): ("84480", "105600"),
        ("ascend910b-64g-x8", "huawei-zone"): ("15600", "19500"),
        ("ascend910b-64g-x8", "sichuan-1"): ("17040", "21300"),
    }
    for (sku, region), (price, list_price) in expected.items():
        offer = c.offer(sku, region)
        assert offer is not None, (sku, region)
        assert offer.monthly_price == Decimal(price)
        assert offer.list_price == Decimal(list_price)
        assert offer.discount_percent == Decimal("20.00")
        assert not offer.example
    # H100 is only in Ningxia-1; A100/A800 are example data at mid-range.
    assert [o.region for o in c.offers if o.sku == "h100-80g-x8"] == ["ningxia-1"]
    a100, a800 = c.offer("a100-80g-x8", "sichuan-1"), c.offer("a800-80g-x8", "sichuan-1")
    assert a100 and a100.example and a100.monthly_price == Decimal("60000")
    assert a800 and a800.example and a800.monthly_price == Decimal("52000")
    (container,) = c.container_offers
    assert container.price_per_gpu_hour == Decimal("1.96")
    assert {r.id for r in c.regions} == {
        "sichuan-1", "sichuan-2", "sichuan-3", "ningxia-1", "huawei-zone"}


def test_seeds_check_figures_hold() -> None:
    c = load_catalog()
    three_months = {
        ("rtx4090-24g-x8", "sichuan-2"): Decimal("23760"),
        ("rtx4090-48g-x8", "sichuan-3"): Decimal("28800"),
        ("h100-80g-x8", "ningxia-1"): Decimal("253440"),
        ("ascend910b-64g-x8", "huawei-zone"): Decimal("46800"),
    }
    for (sku, region), total in three_months.items():
        offer = c.offer(sku, region)
        assert offer is not None and offer.monthly_price * 3 == total
    h100, rtx = c.offer("h100-80g-x8", "ningxia-1"), c.offer("rtx4090-24g-x8", "sichuan-2")
    assert h100 and rtx and round(h100.monthly_price / rtx.monthly_price, 1) == Decimal("10.7")
    huawei, sichuan = c.offer("ascend910b-64g-x8", "huawei-zone"), c.offer(
        "ascend910b-64g-x8", "sichuan-1")
    assert huawei and sichuan and huawei.monthly_price < sichuan.monthly_price


def test_derived_day_and_year_prices_follow_the_documented_rule() -> None:
    c = load_catalog()
    h100 = c.offer("h100-80g-x8", "ningxia-1")
    assert h100 is not None
    assert day_price(c, h100) == Decimal("3660.80")  # 84480 / 30 * 1.3
    assert year_price(c, h100) == Decimal("861696.00")  # 84480 * 12 * 0.85
    assert "÷ 30 × 1.3" in c.pricing.note


def test_interconnect_is_a_catalog_fact() -> None:
    c = load_catalog()
    assert c.gpu_by_id["rtx4090-24g"].nvlink is False
    assert "no NVLink" in c.sku_by_id["rtx4090-24g-x8"].gpu_interconnect
    assert c.sku_by_id["rtx4090-24g-x8"].advertised_interconnect == "NVLink + IB"
    assert c.sku_by_id["h100-80g-x8"].gpu_interconnect_gbps == Decimal("900")
    assert c.gpu_by_id["ascend910b-64g"].vendor == "huawei"


def test_each_offer_default_image_fits_its_gpu_vendor() -> None:
    c = load_catalog()
    for offer in c.offers:
        image = c.image_by_id[offer.default_image]
        assert image.gpu_vendor in ("any", c.gpu_of(offer).vendor), offer.id


def test_unreadable_or_malformed_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="missing.toml: cannot read"):
        load_catalog(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[offers]\n")
    with pytest.raises(CatalogError, match="bad.toml: not valid TOML"):
        load_catalog(bad)


def test_wrong_field_names_file_entry_and_field() -> None:
    data = raw()
    data["offers"][2]["monthly_price"] = "-5"
    with pytest.raises(CatalogError) as exc:
        parse_catalog(data, "my.toml")
    msg = str(exc.value)
    assert msg.startswith("my.toml: ")
    assert "[[offers]] #3 (h100-80g-x8@ningxia-1)" in msg
    assert "field 'monthly_price'" in msg


def test_unknown_field_and_references_are_refused() -> None:
    data = raw()
    data["offers"][0]["colour"] = "blue"
    with pytest.raises(CatalogError, match=r"\[\[offers\]\] #1 .*field 'colour'"):
        parse_catalog(data, "c.toml")
    data = raw()
    data["offers"][0]["region"] = "mars-1"
    with pytest.raises(CatalogError, match=r"field 'region': unknown region 'mars-1'"):
        parse_catalog(data, "c.toml")
    data = raw()
    data["skus"][0]["gpu"] = "nope"
    with pytest.raises(CatalogError, match=r"\[\[skus\]\] #1 \(rtx4090-24g-x8\): field 'gpu'"):
        parse_catalog(data, "c.toml")


def test_duplicates_missing_sections_and_custom_images() -> None:
    data = raw()
    data["regions"].append(dict(data["regions"][0]))
    with pytest.raises(CatalogError, match="id 'sichuan-1' appears twice"):
        parse_catalog(data, "c.toml")
    data = raw()
    del data["images"]
    with pytest.raises(CatalogError, match=r"missing section \[\[images\]\]"):
        parse_catalog(data, "c.toml")
    data = raw()
    data["images"].append({"id": "my-image", "name": "Mine", "os": "Ubuntu",
                           "gpu_vendor": "nvidia", "custom": True})
    with pytest.raises(CatalogError, match="custom image needs 'url' and 'checksum'"):
        parse_catalog(data, "c.toml")
    data["images"][-1] |= {"url": "https://images.example.com/mine.iso",
                           "checksum": "sha256:" + "ab" * 32}
    assert parse_catalog(data, "c.toml").image_by_id["my-image"].custom


def test_operator_catalog_file_is_used(tmp_path: Path) -> None:
    text = DEFAULT_CATALOG.read_text().replace('monthly_price = "84480"',
                                               'monthly_price = "80000"')
    path = tmp_path / "ops.toml"
    path.write_text(text)
    offer = load_catalog(path).offer("h100-80g-x8", "ningxia-1")
    assert offer is not None and offer.monthly_price == Decimal("80000")


def test_acceptance_marks_come_from_the_sku_and_the_offer_overrides() -> None:
    catalog = load_catalog()
    h100 = catalog.offer("h100-80g-x8", "ningxia-1")
    assert h100 is not None
    marks, spec = catalog.acceptance_for(h100)
    assert marks.allreduce_busbw_gbps == 360 and marks.fio_randread_iops == 100_000
    assert spec.count == 8 and spec.matmul_ceiling_tflops == 795 and spec.pcie_gen == 5
    assert spec.memory_bandwidth_gbps == 3350
    busbw = {o.sku: catalog.acceptance_for(o)[0].allreduce_busbw_gbps for o in catalog.offers}
    assert busbw["a100-80g-x8"] == 200 and busbw["a800-80g-x8"] == 140
    assert busbw["rtx4090-24g-x8"] == 10
    data = raw()
    data["offers"][2]["acceptance"] = {"fio_randread_iops": "50000"}
    override = parse_catalog(data, "c.toml")
    offer = override.offer("h100-80g-x8", "ningxia-1")
    assert offer is not None
    marks, _ = override.acceptance_for(offer)
    assert marks.fio_randread_iops == 50_000 and marks.allreduce_busbw_gbps == 360


def test_bad_acceptance_mark_names_the_field() -> None:
    data = raw()
    data["skus"][2]["acceptance"] = {"hbm_fraction": "1.5"}
    with pytest.raises(CatalogError, match=r"\[\[skus\]\] #3 .*acceptance.hbm_fraction"):
        parse_catalog(data, "c.toml")


def test_a_container_takes_its_gpus_share_of_the_host() -> None:
    c = load_catalog(None)
    # The RTX 4090 host: 128 logical cores and 512 GB for 8 GPUs.
    share = c.container_share("rtx4090-24g-container", 3)
    assert (share.cpus, share.memory_gb, share.pids) == (Decimal(48), 192, 3 * 4096)
    data = raw()
    data["container_offers"][0] |= {"cpus_per_gpu": "6", "memory_gb_per_gpu": 40}
    share = parse_catalog(data).container_share("rtx4090-24g-container", 2)
    assert (share.cpus, share.memory_gb) == (Decimal(12), 80)
    # A host SKU with no offer in the region has no cores to divide: the operator says.
    data = raw()
    data["offers"] = [o for o in data["offers"] if o["sku"] != "rtx4090-24g-x8"]
    with pytest.raises(CatalogError, match="set cpus_per_gpu and memory_gb_per_gpu"):
        parse_catalog(data, "c.toml")


def test_sites_group_regions_and_are_checked() -> None:
    catalog = load_catalog()
    assert catalog.regions_by_site == {
        "sichuan": ("sichuan-1", "sichuan-2", "sichuan-3"), "ningxia": ("ningxia-1",),
        "huawei": ("huawei-zone",)}
    assert catalog.site_of("sichuan-2") == "sichuan" and catalog.site_of("gone-1") == "gone-1"
    data = raw()
    data["regions"][0]["site"] = "mars"
    with pytest.raises(CatalogError, match=r"\[\[regions\]\] #1 \(sichuan-1\): field 'site': "
                                           r"unknown site 'mars'"):
        parse_catalog(data, "c.toml")
    data = raw()
    data["sites"][0]["boot_networks"] = ["10.20.0.0/16", "10.20.0.300/24"]
    with pytest.raises(CatalogError, match=r"\[\[sites\]\] #1 \(sichuan\).*'10.20.0.300/24' is "
                                           r"not a network"):
        parse_catalog(data, "c.toml")
    data = raw()
    for region in data["regions"]:  # an operator's catalog without sites: each its own
        region.pop("site", None)
    data.pop("sites")
    assert parse_catalog(data, "c.toml").regions_by_site["ningxia-1"] == ("ningxia-1",)

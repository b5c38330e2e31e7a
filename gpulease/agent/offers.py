"""Which pass marks apply on this node: the offer named, else the catalog's first offer
whose GPU model matches what the backend sees."""

from __future__ import annotations

import os
from pathlib import Path

from gpulease.agent.gpu.backend import GpuBackend
from gpulease.domain.catalog import Catalog, load_catalog
from gpulease.domain.fleet.acceptance import GpuSpec, Thresholds


def _catalog() -> Catalog:
    path = os.environ.get("GPULEASE_CATALOG_FILE")
    return load_catalog(Path(path) if path else None)


def _matches(gpu_id: str, device_name: str) -> bool:
    """h100-80g ↔ "NVIDIA H100 80GB HBM3"; rtx4090-24g ↔ "NVIDIA GeForce RTX 4090"."""
    family = gpu_id.split("-")[0].replace("rtx", "rtx ")
    return family in device_name.lower()


def marks_for(offer: str | None, backend: GpuBackend, model: str = "h100-80g"
              ) -> tuple[Thresholds, GpuSpec]:
    catalog = _catalog()
    if offer:
        sku, _, region = offer.partition("@")
        found = catalog.offer(sku, region)
        if found is None:
            raise LookupError(f"no offer {offer!r} in the catalog; known: "
                              f"{', '.join(sorted(catalog.offer_by_id))}")
        return catalog.acceptance_for(found)
    devices = backend.devices()
    name = devices[0].name if devices else ""
    wanted = model if backend.simulated else None
    for o in catalog.offers:
        gpu_id = catalog.sku_by_id[o.sku].gpu
        if (wanted and gpu_id == wanted) or (not wanted and _matches(gpu_id, name)):
            return catalog.acceptance_for(o)
    raise LookupError(f"no catalog offer has GPU {name or model!r}; name one with --offer")

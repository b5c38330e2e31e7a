"""What an agent's GPU summary may hold, checked before anything of it is stored: numbers
that are numbers (finite: no NaN or Infinity, no strings), integers that are integers (a GPU
index 1.5 or "0" is refused, not rounded), each within what a GPU can report, strings and
lists of bounded length. An agent runs on a tenant's server, as root: its push is untrusted
input, and one bad row must not break a chart or the retention job for everyone."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

Real = Annotated[float, Field(allow_inf_nan=False, ge=-1e12, le=1e12)]
Celsius = Annotated[float, Field(allow_inf_nan=False, ge=-100, le=300)]
Percent = Annotated[float, Field(allow_inf_nan=False, ge=0, le=100)]
Watts = Annotated[float, Field(allow_inf_nan=False, ge=0, le=20_000)]
MHz = Annotated[float, Field(allow_inf_nan=False, ge=0, le=100_000)]
MiB = Annotated[float, Field(allow_inf_nan=False, ge=0, le=10**8)]
Seconds = Annotated[float, Field(allow_inf_nan=False, ge=0, le=10**6)]
Count = Annotated[StrictInt, Field(ge=0, le=10**12)]
Link = Annotated[StrictInt, Field(ge=0, le=63)]
Xid = Annotated[StrictInt, Field(ge=0, le=100_000)]


class PushedSummary(BaseModel):
    """One GPU's window as the agent's /v1/summary gives it (domain/fleet/telemetry.py's
    GpuSummary), bounded."""

    model_config = ConfigDict(extra="forbid", strict=False)

    index: Annotated[StrictInt, Field(ge=0, le=63)]
    uuid: str = Field(max_length=80)
    name: str = Field(max_length=200)
    samples: Count
    start: Real
    end: Real
    temp_max_c: Celsius | None
    temp_avg_c: Celsius | None
    power_avg_w: Watts | None
    power_max_w: Watts | None
    util_avg_pct: Percent | None
    sm_clock_min_mhz: MHz | None
    sm_clock_max_mhz: MHz | None
    fb_used_max_mib: MiB | None
    thermal_throttle_s: Seconds
    power_throttle_s: Seconds
    xids: list[Xid] = Field(max_length=64)
    ecc_sbe_delta: Count
    ecc_dbe_delta: Count
    ecc_dbe_total: Count
    remapped_rows_uncorrectable: Count
    row_remap_failure: StrictBool
    pcie_replay_delta: Count
    nvlink_links: Link
    nvlink_down: list[Link] = Field(max_length=64)
    energy_j: Annotated[float, Field(allow_inf_nan=False, ge=0, le=1e15)] | None
    simulated: StrictBool = False
    memory_temp_max_c: Celsius | None = None
    temp_last_c: Celsius | None = None
    thermal_samples: Count = 0
    power_brake_samples: Count = 0
    temp_rise_c_per_s: Annotated[float, Field(allow_inf_nan=False, ge=-1000, le=1000)] | None \
        = None
    temp_settle_c: Celsius | None = None
    health: str | None = Field(default=None, max_length=32)


class OutOfBounds(ValueError):
    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


def bounded(summary: object) -> dict[str, Any]:
    """The summary, checked; OutOfBounds names the first field that is not."""
    try:
        return PushedSummary.model_validate(summary).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "summary"
        raise OutOfBounds(where, first["msg"]) from None

"""The advisor's latency with the full catalog (every offer and container offer, every
node count up to 8, every layout). Prints JSON: in process, the pure advice (domain) and
the service (with today's prices and live stock read from the database, SQLite), beside a
quote through the same service layer as the baseline in the same run.

Usage: python bench/advise_latency.py [N]
"""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_platform, summary_ms
from gpulease.demo import seed_demo_fleet
from gpulease.domain.advisor import Ask, advise
from gpulease.domain.sizing import Job, Precision, Workload, parse_params, shape_for
from gpulease.schemas.advisor import AdviseRequest
from gpulease.schemas.money import QuoteRequest
from gpulease.services.catalog import quotes
from gpulease.services.catalog.advisor import advise_job

CASES = {
    "70B full-finetune bf16, 1B tokens": ("70B", "full-finetune", "bf16", {"tokens": 1e9}),
    "7B lora, 96 h": ("7B", "lora", "bf16", {"hours": 96.0}),
    "70B inference, 100M tokens": ("70B", "inference", "bf16", {"tokens": 1e8}),
}


def timed(fn: object, n: int) -> dict[str, float]:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - t)
    return summary_ms(samples)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    out: dict[str, object] = {"bench": "advise_latency", "n": n}
    with bench_platform("sqlite") as p:
        seed_demo_fleet(p, 2)
        catalog = p.price_book()
        out["catalog"] = {"offers": len(catalog.offers),
                          "container_offers": len(catalog.container_offers)}
        for name, (size, workload, precision, extra) in CASES.items():
            job = Job(shape_for(parse_params(size)), Workload(workload), Precision(precision))
            req = AdviseRequest(params=size, workload=workload, precision=precision,
                                **extra)  # type: ignore[arg-type]
            out[name] = {
                "domain": timed(lambda j=job, e=extra: advise(catalog, j, Ask(**e)), n),
                "service": timed(lambda r=req: advise_job(p, r), n),
            }
        qreq = QuoteRequest(sku="h100-80g-x8", region="ningxia-1", term="month", count=3,
                            add={"public-bandwidth": Decimal(100)})
        out["baseline_quote_service"] = timed(lambda: quotes.make_quote(p, qreq), n)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

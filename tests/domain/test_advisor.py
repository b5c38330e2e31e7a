"""The advisor's answers: the seeds' 70B example and the 96/140/89-hour case, rankings by
total cost with stock, bare metal or container with reasons, the RTX 4090 tensor-parallel
warning, Ascend for domestic hardware, bad input naming the field; over the service, the
API and the CLI."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import httpx
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.domain.advisor import Ask, Market, advise, seeds_jitter_case
from gpulease.domain.catalog import load_catalog
from gpulease.domain.errors import InvalidInput
from gpulease.domain.sizing import (
    Job,
    Layout,
    Precision,
    Workload,
    memory_terms,
    parse_params,
    per_gpu,
    shape_for,
)
from gpulease.platform import Platform
from gpulease.schemas.advisor import AdviseRequest
from gpulease.services.catalog.advisor import advise_job
from gpulease.testing.callers import TenantCtx, auth
from gpulease.testing.servers import LiveServer

CATALOG = load_catalog()


def job(size: str, workload: str, precision: str = "bf16", **kw: object) -> Job:
    return Job(shape_for(parse_params(size)), Workload(workload), Precision(precision),
               **kw)  # type: ignore[arg-type]


def test_the_seeds_70b_example() -> None:
    a = advise(CATALOG, job("70B", "full-finetune"), Ask(tokens=1e9))
    assert round(a.quick_estimate_gb) == 168
    assert str(a.quick_estimate_text) == "70B × 2 bytes × 1.2 ≈ 168 GB → at least 3 × 80 GB cards"
    terms = {name: gb for name, gb, _ in a.terms}
    # the detailed model: 16 bytes per parameter for mixed-precision Adam, before activations
    assert terms["weights"] + terms["gradients"] + terms["optimizer"] == pytest.approx(
        16 * a.params / 1e9)
    assert all(why for _, _, why in a.terms)
    assert a.shape_inferred and "inferred" in str(a.warnings[0])


def test_the_seeds_96_140_89_hour_case() -> None:
    case = seeds_jitter_case()
    assert (case.planned_hours, round(case.container_hours), round(case.bare_metal_hours)) == (
        96, 140, 89)
    a = advise(CATALOG, job("7B", "lora"), Ask(hours=96, gpu_filter="rtx4090-24g"))
    by_kind = {o.kind: o for o in a.options}
    assert round(by_kind["container"].hours) == 140 and round(by_kind["bare_metal"].hours) == 89
    assert "jitter" in " ".join(by_kind["container"].notes)
    assert any("beyond 72 h" in str(r) for r in a.bare_metal_reasons)
    assert "predictable" in str(a.recommendation) and "89 h" in str(a.recommendation)


def test_options_rank_by_total_cost_and_fit_in_memory() -> None:
    a = advise(CATALOG, job("70B", "full-finetune"), Ask(tokens=2e9),
               Market(stock={"h100-80g-x8@ningxia-1": 4}))
    assert a.options and all(o.memory_per_gpu_gb <= o.memory_usable_gb for o in a.options)
    assert all(sum(gb for _, gb in o.per_gpu_gb) == pytest.approx(o.memory_per_gpu_gb)
               for o in a.options)
    in_stock = [o for o in a.options if o.in_stock]
    assert in_stock[0].offer == "h100-80g-x8@ningxia-1"  # the only one with stock first
    rest = [o.cost for o in a.options if not o.in_stock]
    assert rest == sorted(rest)
    assert all(o.kind == "bare_metal" for o in a.options[:3])  # 70B training: multi-GPU


def test_short_small_jobs_go_to_a_container_and_long_ones_to_bare_metal() -> None:
    short = advise(CATALOG, job("7B", "qlora", "int4"), Ask(tokens=2e7))
    assert short.options[0].kind == "container" and short.options[0].hours < 72
    long = advise(CATALOG, job("13B", "full-finetune"), Ask(tokens=3e9))
    assert long.options[0].kind == "bare_metal"
    assert long.bare_metal_reasons


def test_zero_and_tensor_parallel_split_memory() -> None:
    terms = memory_terms(job("70B", "full-finetune"))
    alone = sum(per_gpu(terms, Layout(8)).values())
    zero3 = sum(per_gpu(terms, Layout(8, zero=3)).values())
    tp8 = sum(per_gpu(terms, Layout(8, tp=8)).values())
    assert zero3 < alone and tp8 < alone
    states = {t.name: t.bytes for t in terms}
    assert per_gpu(terms, Layout(8, zero=1))["optimizer"] == states["optimizer"] / 8
    assert per_gpu(terms, Layout(8, zero=1))["gradients"] == states["gradients"]


def test_4090_tensor_parallel_warning_and_domestic_ascend() -> None:
    a = advise(CATALOG, job("70B", "inference"), Ask(tokens=1e8, gpu_filter="rtx4090-24g"))
    assert any("over PCIe (no peer-to-peer) (10 GB/s" in n for o in a.options for n in o.notes)
    assert any("RTX 4090" in str(w) and "no NVLink" in str(w) for w in a.warnings)
    ascend = advise(CATALOG, job("70B", "inference"), Ask(tokens=1e8, domestic=True))
    assert ascend.options and all("910B" in o.gpu for o in ascend.options)
    assert all("910B" not in o.gpu for o in advise(CATALOG, job("7B", "inference"),
                                                   Ask(tokens=1e8)).options)


@pytest.mark.parametrize(("change", "field"), [
    ({"precision": "fp64"}, "precision"), ({"workload": "vibes"}, "workload"),
    ({"params": "0B"}, "params"), ({"params": "seventy"}, "params"),
    ({"seq_len": 0}, "seq_len"), ({"batch": -1}, "batch"), ({"params": None}, "params"),
    ({"layers": 32}, "hidden"), ({"gpu": "tpu-v9"}, "gpu"),
    ({"precision": "int4", "workload": "full-finetune"}, "precision"),
])
def test_bad_input_names_the_field(platform: Platform, change: dict[str, object],
                                   field: str) -> None:
    req = {"params": "7B", "workload": "lora", "precision": "bf16", **change}
    try:
        body = AdviseRequest(**req)  # type: ignore[arg-type]
    except ValidationError as refused:  # out of the request's bounds (a 422 at the API)
        assert refused.errors()[0]["loc"][0] == field
        return
    with pytest.raises(InvalidInput) as exc:
        advise_job(platform, body)
    assert exc.value.field == field
    if field == "precision":
        assert "bf16" in (exc.value.accepted or [])


def test_advise_over_http_and_the_cli(fleet: Platform, server: LiveServer,
                                      tenant: TenantCtx) -> None:
    api = f"{server.url}/api/v1"
    r = httpx.post(f"{api}/advise", headers=auth(tenant.token), json={
        "params": "70B", "workload": "full-finetune", "precision": "bf16", "tokens": 1e9})
    assert r.status_code == 200
    body = r.json()
    assert body["quick_estimate_gb"] == 168.0 and body["options"]
    assert body["options"][0]["stock"] >= 1 and Decimal(body["options"][0]["cost"]) > 0
    bad = httpx.post(f"{api}/advise", headers=auth(tenant.token), json={
        "params": "7B", "workload": "lora", "seq_len": "long"})
    assert bad.status_code == 422 and bad.json()["field"] == "seq_len"
    unknown = httpx.post(f"{api}/advise", headers=auth(tenant.token), json={
        "params": "7B", "workload": "lora", "precision": "fp64"})
    assert unknown.status_code == 422 and "int4" in unknown.json()["accepted"]
    env = {"GPULEASE_URL": server.url, "GPULEASE_TOKEN": tenant.token, "COLUMNS": "250"}
    out = CliRunner().invoke(app, ["advise", "--params", "7B", "--workload", "lora",
                                   "--hours", "96", "--gpu", "rtx4090-24g"], env=env)
    assert out.exit_code == 0, out.output
    assert "140.0" in out.output and "89.0" in out.output and "Recommendation" in out.output


def test_time_comes_from_this_platforms_acceptance_runs_when_it_has_them(
    fleet: Platform,
) -> None:
    import json
    import uuid
    from datetime import UTC, datetime

    from sqlalchemy import select

    from gpulease.db.tables import AcceptanceReport, Node

    # a 7B inference fits one GPU: no communication, so time scales with the rate alone
    req = AdviseRequest(params="7B", workload="inference", tokens=1e9, gpu="h100-80g")
    before = advise_job(fleet, req).options[0]
    with fleet.db.write() as s:
        node_id = s.scalar(select(Node.id).where(Node.sku == "h100-80g-x8").limit(1))
        for simulated, tflops in ((False, 600.0), (False, 620.0), (True, 10.0)):
            checks = [{"name": "matmul_bf16", "passed": True, "value": tflops, "unit":
                       "TFLOP/s", "threshold": "", "gpu": g} for g in range(8)]
            s.add(AcceptanceReport(id=uuid.uuid4().hex, node_id=node_id, instance_id=None,
                                   created_at=datetime.now(UTC), trigger="deploy",
                                   passed=True, simulated=simulated,
                                   report_json=json.dumps({"checks": checks})))
    after = advise_job(fleet, req).options[0]
    # the median of the real runs (610) replaces the catalog's 795; simulated runs ignored
    assert after.tokens_per_hour == pytest.approx(before.tokens_per_hour * 610 / 795, rel=1e-3)
    assert any("610 TFLOP/s" in n for n in after.notes)


def test_tied_embeddings_biases_learned_positions_and_post_ln_are_inputs() -> None:
    from gpulease.services.catalog.advisor import job_of

    gpt2 = job_of(AdviseRequest(layers=12, hidden=768, heads=12, kv_heads=12, vocab=50257,
                                ffn=3072, mlp="gelu", norm="layernorm", bias=True,
                                tied_embeddings=True, learned_positions=1024,
                                workload="pretrain"))
    assert gpt2.arch.params == 124_439_808  # GPT-2 small, as published
    bert = job_of(AdviseRequest(layers=12, hidden=768, heads=12, kv_heads=12, vocab=30522,
                                ffn=3072, mlp="gelu", norm="layernorm", bias=True,
                                tied_embeddings=True, learned_positions=512, post_norm=True,
                                workload="full-finetune"))
    # BERT-base's encoder and embeddings, less its 2 token types and embedding LayerNorm
    assert bert.arch.params == 108_891_648 - 2 * 768 - 2 * 768
    assert not bert.arch.pre_norm


def test_sequence_parallel_is_a_layout_of_its_own_and_said() -> None:
    from gpulease.domain.sizing import Architecture

    arch = Architecture(80, 8192, 64, 8, 32000, 28672)
    terms = memory_terms(Job(arch, Workload.FULL_FINETUNE, Precision.BF16, seq_len=8192))
    acts = next(t for t in terms if t.name == "activations")
    # checkpointed layer inputs, the norms and the blocks' inputs stay whole under TP alone
    assert 0.1 < acts.tp_split < 0.5
    plain = per_gpu(terms, Layout(8, tp=8))["activations"]
    split = per_gpu(terms, Layout(8, tp=8, sp=True))["activations"]
    assert split == pytest.approx(acts.bytes / 8) and plain > 3 * split
    assert Layout(16, tp=8, sp=True).describe() == (
        "16 GPUs, tensor parallel 8 with sequence parallel, data parallel 2")


def test_communication_comes_from_the_links_the_catalog_names() -> None:
    from gpulease.domain.advisor import Assumptions, links, step_time

    a = Assumptions()
    h100_sku, g4090_sku = CATALOG.sku_by_id["h100-80g-x8"], CATALOG.sku_by_id["rtx4090-24g-x8"]
    h100, g4090 = CATALOG.gpu_by_id["h100-80g"], CATALOG.gpu_by_id["rtx4090-24g"]
    assert (links(h100_sku, h100, a).intra_gbps, links(g4090_sku, g4090, a).intra_gbps) == (
        360, 10)  # the all-reduce marks a healthy node measures
    assert links(h100_sku, h100, a).inter_gbps == pytest.approx(3200 / 8 * 0.8)
    work = job("70B", "full-finetune")
    layout = Layout(16, tp=8, sp=True, zero=1)
    fast = step_time(work, layout, 2, 400e12, links(h100_sku, h100, a), a)
    slow = step_time(work, layout, 2, 400e12, links(g4090_sku, g4090, a), a)
    assert slow.compute_s == pytest.approx(fast.compute_s)  # the same work at the same rate
    assert slow.tensor_parallel_s == pytest.approx(fast.tensor_parallel_s * 36)
    assert slow.seconds > 1.5 * fast.seconds
    plan = advise(CATALOG, work, Ask(tokens=1e9, gpu_filter="rtx4090-24g")).options[0]
    assert "with sequence parallel" in plan.layout
    assert any("of each step" in n for n in plan.notes)


def test_attention_products_count_and_grow_with_the_sequence() -> None:
    from gpulease.domain.advisor import attention_flops_per_token, flops_per_token

    short, long = job("7B", "pretrain"), replace(job("7B", "pretrain"), seq_len=32768)
    arch = short.arch
    assert attention_flops_per_token(short) == 4 * arch.layers * 4096 * arch.hidden * 0.5
    assert flops_per_token(long) - flops_per_token(short) == pytest.approx(
        (3 + 1) * 4 * arch.layers * (32768 - 4096) * arch.hidden * 0.5)

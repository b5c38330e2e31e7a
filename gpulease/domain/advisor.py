"""From a job to a ranked list of machines: every offer and container offer the catalog
holds, every node or GPU count that fits the job's memory, its time and its total cost
(term chosen: hour, day or month), bare metal or container with the reasons. Pure: the
catalog (at today's prices), stock and a job in, the advice out. No PyTorch."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from gpulease.domain.billing.money import to_fen
from gpulease.domain.billing.pricing import unit_price
from gpulease.domain.catalog import Catalog, ContainerOffer, Gpu, Offer, Sku
from gpulease.domain.phrases import Phrase, listed, phrase
from gpulease.domain.sizing import (
    GB,
    Job,
    Layout,
    Workload,
    fit,
    memory_terms,
    quick_estimate_gb,
)

HOURS_PER_DAY, HOURS_PER_MONTH = 24, 720


@dataclass(frozen=True)
class Assumptions:
    """The stated numbers behind every estimate (shown with the advice)."""

    usable_memory: float = 0.90  # of a GPU's memory: the rest is CUDA context, fragments
    # A training step reaches this share of the GPU's bf16 matmul rate (the platform's
    # measured acceptance figure when the catalog has one, else 80 % of the data sheet).
    utilization: float = 0.50
    # Communication (advisor.step_time): a training step is this many tokens over all
    # data-parallel replicas (micro-batches accumulate up to it); the gradient exchange
    # hides behind this share of the backward pass; the node's network carries this
    # share of its line rate.
    tokens_per_step: float = 2_000_000
    gradient_overlap: float = 2 / 3
    network_efficiency: float = 0.80
    # The seeds' case: a 7B job planned at 96 h on a shared RTX 4090 container took 140 h
    # after a neighbour took PCIe bandwidth, and 89 h on bare metal.
    container_overhead: float = 96 / 89 - 1  # virtualization and sharing: 7.9 %
    jitter_slowdown: float = 140 / 96 - 1  # expected extra time once a neighbour hits: 45.8 %
    jitter_ramp_hours: float = 72.0  # the risk reaches its full size at 72 h (the seeds)
    max_nodes: int = 8

    def jitter(self, hours: float) -> float:
        """Expected slowdown of a container job of `hours` from noisy neighbours."""
        return self.jitter_slowdown * min(1.0, hours / self.jitter_ramp_hours)


@dataclass(frozen=True)
class Option:
    kind: str  # bare_metal | container
    offer: str
    sku: str
    region: str
    gpu: str
    nodes: int
    gpus: int
    layout: str
    memory_per_gpu_gb: float
    memory_usable_gb: float
    hours: float  # expected wall time, jitter included for containers
    nominal_hours: float
    term: str  # hour | day | month
    periods: int
    cost: Decimal
    stock: int
    in_stock: bool
    within_budget: bool
    tokens_per_hour: float
    notes: tuple[str, ...] = ()
    per_gpu_gb: tuple[tuple[str, float], ...] = ()  # each memory term on one GPU


@dataclass(frozen=True)
class Advice:
    params: int
    active_params: int
    shape_inferred: bool
    quick_estimate_gb: float
    quick_estimate_text: Phrase
    terms: tuple[tuple[str, float, str], ...]  # (name, GB for the whole job, why)
    total_gb: float
    work: str  # how the time was derived
    options: tuple[Option, ...]
    recommendation: Phrase  # what people read: said in their language where shown
    bare_metal_reasons: tuple[Phrase, ...]
    warnings: tuple[Phrase, ...]
    assumptions: Assumptions = field(default_factory=Assumptions)


def attention_flops_per_token(job: Job) -> float:
    """The attention's own matrix products, forward, per token: Q·Kᵀ and the weights · V
    over the sequence, 2 × 2 × seq × hidden per layer; causal (decoders) half of that.
    Embedding lookups are not products and count nothing."""
    a = job.arch
    causal = 0.5 if a.pre_norm else 1.0  # post-LN shapes are encoders (BERT): bidirectional
    return 4.0 * a.layers * job.seq_len * a.hidden * causal


def flops_per_token(job: Job) -> float:
    """Training: 6 × active parameters (forward 2, backward 4), + 2 more when activations
    are recomputed; LoRA/QLoRA skip the weight gradients (4, + 2); inference 2. Plus the
    attention's products: × 3 in training (its backward is twice its forward; + 1 when
    recomputed), × 1 in inference."""
    p = job.arch.active_params
    attention = attention_flops_per_token(job)
    if job.workload is Workload.INFERENCE:
        return 2.0 * p + attention
    base = 6.0 if job.workload.full else 4.0
    recompute = 1.0 if job.checkpointing else 0.0
    return (base + 2.0 * recompute) * p + (3.0 + recompute) * attention


def gpu_rate(gpu: Gpu, a: Assumptions, measured: Mapping[str, float] | None = None) -> float:
    """Sustained FLOP/s of one GPU on a training step: the bf16 matmul rate this platform's
    acceptance runs measured on the GPU (median), else the catalog's measured figure, else
    80 % of the data sheet; × the stated utilization."""
    peak = (measured or {}).get(gpu.id) or float(
        gpu.measured_bf16_matmul_tflops or gpu.bf16_dense_tflops * Decimal("0.8"))
    return peak * 1e12 * a.utilization


def has_gpu_link(gpu: Gpu) -> bool:
    """A GPU-to-GPU link beyond PCIe: NVLink, or Ascend's HCCS mesh."""
    return gpu.nvlink or gpu.gpu_link.upper().startswith("HCCS")


@dataclass(frozen=True)
class Links:
    """What collectives get: all-reduce bus bandwidth inside a node (GB/s; the SKU's
    acceptance mark, which is what a healthy node measures: NVLink, HCCS, or PCIe without
    peer-to-peer on the RTX 4090), and the node's network to other nodes (GB/s, all
    ports)."""

    intra_gbps: float
    inter_gbps: float
    intra_name: str
    gpu_link: bool = True  # False: tensor parallel traffic and the rest share PCIe


def links(sku: Sku, gpu: Gpu, a: Assumptions) -> Links:
    mark = sku.acceptance.allreduce_busbw_gbps
    intra = float(mark) if mark else float(sku.gpu_interconnect_gbps) * 0.4
    inter = float(sku.network_gbits or 200) / 8 * a.network_efficiency
    name = ("NVLink" if gpu.nvlink else "HCCS" if has_gpu_link(gpu)
            else "PCIe (no peer-to-peer)")
    return Links(intra, inter, name, has_gpu_link(gpu))


@dataclass(frozen=True)
class Step:
    """One training step (or, for inference, one batch) of a layout, in seconds."""

    seconds: float
    tokens: float
    compute_s: float
    tensor_parallel_s: float
    gradients_s: float  # the part of the gradient exchange not hidden by the backward pass
    bubble: float


def step_time(job: Job, layout: Layout, nodes: int, rate: float, link: Links,
              a: Assumptions) -> Step:
    """Compute at `rate` FLOP/s per GPU, plus what the layout sends: tensor parallel's
    all-reduces of each layer's output (2 forward, 2 backward, 2 more when recomputed;
    sequence parallel sends the same volume as gathers and scatters), never hidden; the
    gradients' all-reduce across data-parallel replicas (ZeRO-3 also gathers the weights:
    1.5 ×), inside the node or over the network, hidden behind the backward pass up to
    `gradient_overlap` (not at all when tensor parallelism already fills PCIe); a
    pipeline's bubble. Ring collectives move 2(n − 1)/n of the data."""
    arch, fpt = job.arch, flops_per_token(job)
    tokens_mb = job.seq_len * job.batch
    dp = layout.dp if job.workload.trains else 1
    accumulate = max(1, math.ceil(a.tokens_per_step / (dp * tokens_mb))) if (
        job.workload.trains) else 1
    compute = tokens_mb * fpt / (layout.tp * layout.pp * rate)
    tp = 0.0
    if layout.tp > 1:
        reduces = (4 + (2 if job.checkpointing else 0)) if job.workload.trains else 2
        volume = arch.layers / layout.pp * reduces * tokens_mb * arch.hidden * 2
        tp = volume * 2 * (layout.tp - 1) / layout.tp / (link.intra_gbps * 1e9)
    bubble = ((layout.pp - 1) / (accumulate + layout.pp - 1)) if layout.pp > 1 else 0.0
    exposed = 0.0
    gather = 0.0
    # Over PCIe the tensor-parallel all-reduces already fill the bus while the GPUs
    # compute: the gradient exchange and ZeRO-3's gathers find no idle link to hide in.
    overlap = a.gradient_overlap if link.gpu_link or layout.tp == 1 else 0.0
    if dp > 1:
        bandwidth = (link.inter_gbps if nodes > 1 else link.intra_gbps) * 1e9
        ring = 2 * ((nodes - 1) / nodes if nodes > 1 else (dp - 1) / dp)
        trained = (job.arch.params if job.workload.full else job.lora_params())
        grads = 2.0 * trained / (layout.tp * layout.pp)
        exposed = max(0.0, grads * ring / bandwidth - overlap * accumulate * compute)
        if layout.zero >= 3:  # the 16-bit weights gathered for every pass of every micro-batch
            passes = 2 + (1 if job.checkpointing else 0)
            weights = 2.0 * job.arch.params / (layout.tp * layout.pp)
            gather = max(0.0, passes * weights * ring / 2 / bandwidth - overlap * compute)
    busy = accumulate * (compute + tp + gather) / (1 - bubble)
    return Step(busy + exposed, dp * accumulate * tokens_mb, accumulate * compute,
                accumulate * tp, exposed + accumulate * gather, bubble)


def _throughput(job: Job, sku: Sku, gpu: Gpu, nodes: int, layout: Layout, market: Market
                ) -> tuple[float, list[str]]:
    """The layout's sustained FLOP/s over all its GPUs, communication counted, and what
    the communication costs in words."""
    a, measured = market.assumptions, market.measured
    per_gpu = gpu_rate(gpu, a, measured)
    notes = []
    if measured and gpu.id in measured:
        notes.append(f"rate from this platform's acceptance runs: {measured[gpu.id]:,.0f} "
                     "TFLOP/s bf16 matmul per GPU (median)")
    link = links(sku, gpu, a)
    step = step_time(job, layout, nodes, per_gpu, link, a)
    rate = step.tokens * flops_per_token(job) / step.seconds
    lost = 1 - step.compute_s / step.seconds
    if step.tensor_parallel_s:
        notes.append(f"tensor parallelism {layout.tp} over {link.intra_name} "
                     f"({link.intra_gbps:,.0f} GB/s all-reduce): "
                     f"{step.tensor_parallel_s / step.seconds:.0%} of each step")
    if step.gradients_s:
        where = (f"the network ({link.inter_gbps:,.0f} GB/s per node)" if nodes > 1
                 else f"{link.intra_name}")
        notes.append(f"gradient exchange over {where}: {step.gradients_s / step.seconds:.0%} "
                     "of each step not hidden by the backward pass")
    if step.bubble:
        notes.append(f"pipeline bubble {step.bubble:.0%}")
    if lost >= 0.005:
        notes.append(f"communication and waiting: {lost:.0%} of the time; the rest computes "
                     f"at {a.utilization:.0%} of the matmul rate")
    return rate, notes


def bare_metal_cost(catalog: Catalog, offer: Offer, nodes: int, hours: float
                    ) -> tuple[str, int, Decimal]:
    """The cheapest way to rent `nodes` servers for `hours`: by the day or the month."""
    days = max(1, math.ceil(hours / HOURS_PER_DAY - 1e-9))
    months = max(1, math.ceil(hours / HOURS_PER_MONTH - 1e-9))
    by_day = unit_price(catalog, offer, "day") * days * nodes
    by_month = unit_price(catalog, offer, "month") * months * nodes
    return ("day", days, to_fen(by_day)) if by_day < by_month else (
        "month", months, to_fen(by_month))


def _container_cost(offer: ContainerOffer, gpus: int, hours: float) -> tuple[int, Decimal]:
    billed = max(1, math.ceil(hours - 1e-9))
    return billed, to_fen(offer.price_per_gpu_hour * gpus * billed)


@dataclass(frozen=True)
class Ask:
    """What the advice is for besides the job: its size in tokens, or its planned hours
    (neither: one day); a budget; only domestic GPUs, or one GPU model; how many options."""

    tokens: float | None = None
    hours: float | None = None
    budget: Decimal | None = None
    domestic: bool = False
    gpu_filter: str | None = None
    limit: int = 12


@dataclass(frozen=True)
class Market:
    """What the platform knows beside its catalog: the servers free per offer, the GPUs
    free per container offer, the GPU rates its acceptance runs measured, and the
    assumptions behind the estimates."""

    stock: Mapping[str, int] = field(default_factory=dict)
    container_stock: Mapping[str, int] = field(default_factory=dict)
    measured: Mapping[str, float] | None = None
    assumptions: Assumptions = Assumptions()


def advise(catalog: Catalog, job: Job, ask: Ask = Ask(), market: Market = Market()) -> Advice:
    """Rank every configuration that fits. With `tokens`, each one's time comes from the
    job's FLOPs; with `hours` (planned, at nominal speed), each is costed for that time;
    with neither, for one day. Containers add the neighbour-jitter risk to their time."""
    tokens, hours, budget, limit = ask.tokens, ask.hours, ask.budget, ask.limit
    domestic, gpu_filter = ask.domestic, ask.gpu_filter
    stock, container_stock = market.stock, market.container_stock
    a = market.assumptions
    terms = memory_terms(job)
    total = sum(t.bytes for t in terms)
    fpt = flops_per_token(job)
    options: list[Option] = []
    warnings: list[Phrase] = []
    if job.arch.inferred:
        warnings.append(phrase("Model shape inferred from the parameter count (Llama-like); "
                               "give layers, hidden, heads, kv_heads, vocab and ffn for exact "
                               "activations."))

    def timing(rate: float, kind: str) -> tuple[float, float, float]:
        nominal = (tokens * fpt / rate / 3600) if tokens else (hours or 24.0)
        if kind == "container":
            base = nominal * (1 + a.container_overhead) if tokens else nominal
            return base * (1 + a.jitter(base)), base, rate / fpt * 3600
        base = nominal if tokens else nominal / (1 + a.container_overhead)
        return base, base, rate / fpt * 3600

    for offer in catalog.offers:
        sku = catalog.sku_by_id[offer.sku]
        gpu = catalog.gpu_by_id[sku.gpu]
        if not _wanted(gpu, domestic, gpu_filter):
            continue
        usable = gpu.memory_gb * 1e9 * a.usable_memory
        for nodes in range(1, (a.max_nodes if sku.infiniband else 1) + 1):
            gpus = nodes * sku.gpu_count
            placed = fit(terms, gpus, sku.gpu_count, usable, job.workload.trains)
            if placed is None:
                continue
            layout, share = placed
            rate, notes = _throughput(job, sku, gpu, nodes, layout, market)
            wall, nominal, tph = timing(rate, "bare_metal")
            term, periods, cost = bare_metal_cost(catalog, offer, nodes, wall)
            free = stock.get(offer.id, 0)
            options.append(Option(
                "bare_metal", offer.id, offer.sku, offer.region, gpu.name, nodes, gpus,
                layout.describe(), sum(share.values()) / GB, usable / GB, wall, nominal, term,
                periods, cost, free, free >= nodes, budget is None or cost <= budget, tph,
                tuple(notes), tuple((k, v / GB) for k, v in share.items())))
            break  # more nodes of the same offer only cost more once one fits
    for co in catalog.container_offers:
        gpu = catalog.gpu_by_id[co.gpu]
        if not _wanted(gpu, domestic, gpu_filter):
            continue
        usable = gpu.memory_gb * 1e9 * a.usable_memory
        for gpus in range(1, co.max_gpus + 1):
            placed = fit(terms, gpus, co.max_gpus, usable, job.workload.trains)
            if placed is None:
                continue
            layout, share = placed
            host = catalog.sku_by_id[co.host_sku]
            rate, notes = _throughput(job, host, gpu, 1, layout, market)
            wall, nominal, tph = timing(rate, "container")
            billed, cost = _container_cost(co, gpus, wall)
            free = container_stock.get(co.id, 0)
            notes.append(f"neighbour-jitter risk priced as +{a.jitter(nominal):.0%} time")
            options.append(Option(
                "container", co.id, co.host_sku, co.region, gpu.name, 1, gpus,
                layout.describe(), sum(share.values()) / GB, usable / GB, wall, nominal,
                "hour", billed, cost, free, free >= gpus, budget is None or cost <= budget,
                tph, tuple(notes), tuple((k, v / GB) for k, v in share.items())))
            break
    options.sort(key=lambda o: (not o.in_stock, not o.within_budget, o.cost, o.hours))
    reasons = _bare_metal_reasons(options, a)
    pcie_tp = sorted({o.gpu for o in options[:3]
                      if "tensor parallelism" in (n := " ".join(o.notes)) and "PCIe" in n})
    if pcie_tp:
        warnings.append(phrase("{gpus}: no NVLink, so tensor parallelism runs over PCIe "
                               "(slow, and counted so); prefer an NVLink offer (H100, H200, "
                               "A100, A800) for a model that needs it.",
                               gpus=", ".join(pcie_tp)))
    short = [o for o in options if not o.in_stock]
    if options and len(short) == len(options):
        warnings.append(phrase("None of these has the servers free now; the stock column "
                               "says how many are."))
    if not options:
        warnings.append(phrase("No offer of the catalog holds this job: lower the precision, "
                               "use LoRA/QLoRA, shorten the sequence or the micro-batch."))
    said = job.arch.nominal_params or job.arch.params  # the size as the tenant gave it
    quick = quick_estimate_gb(said, job.precision)
    return Advice(
        params=job.arch.params, active_params=job.arch.active_params,
        shape_inferred=job.arch.inferred, quick_estimate_gb=quick,
        quick_estimate_text=phrase(
            "{billions}B × {bytes} bytes × 1.2 ≈ {gb} GB → at least {cards} × 80 GB cards",
            billions=f"{said / 1e9:g}", bytes=f"{job.precision.bytes:g}", gb=f"{quick:,.0f}",
            cards=math.ceil(quick / 80)),
        terms=tuple((t.name, t.bytes / GB, t.why) for t in terms), total_gb=total / GB,
        work=(f"{tokens:,.0f} tokens × {fpt / 1e9:,.1f} GFLOP per token" if tokens else
              f"{hours or 24:g} planned hours"),
        options=tuple(options[:limit]), recommendation=_recommend(options, reasons),
        bare_metal_reasons=tuple(reasons), warnings=tuple(warnings), assumptions=a)


def _wanted(gpu: Gpu, domestic: bool, gpu_filter: str | None) -> bool:
    if gpu_filter and gpu_filter != gpu.id:
        return False
    # Ascend runs CANN/MindSpore, not CUDA: offered when domestic hardware is required.
    return (gpu.vendor == "huawei") == domestic


def _bare_metal_reasons(options: list[Option], a: Assumptions) -> list[Phrase]:
    reasons: list[Phrase] = []
    best = options[0] if options else None
    if best is None:
        return reasons
    if best.nominal_hours > a.jitter_ramp_hours:
        reasons.append(phrase("the job runs {hours} h, beyond {ramp} h: a shared host's "
                              "jitter risk is at its full size",
                              hours=f"{best.nominal_hours:.0f}",
                              ramp=f"{a.jitter_ramp_hours:.0f}"))
    if best.nodes > 1:
        reasons.append(phrase("it needs more GPUs than one container host gives ({nodes} "
                              "nodes on one InfiniBand fabric)", nodes=best.nodes))
    elif not any(o.kind == "container" for o in options):
        reasons.append(phrase("it needs more GPUs than one container host gives"))
    return reasons


def _recommend(options: list[Option], reasons: list[Phrase]) -> Phrase:
    if not options:
        return phrase("Nothing in the catalog fits this job as given.")
    best = options[0]
    what = (phrase("{nodes} × {sku} in {region}", nodes=best.nodes, sku=best.sku,
                   region=best.region) if best.kind == "bare_metal"
            else phrase("a {gpus}-GPU container ({offer})", gpus=best.gpus, offer=best.offer))
    head = phrase("{what}: {layout}, about {hours} h, ¥{cost:,.2f} ({periods} × {term})",
                  what=what, layout=best.layout, hours=f"{best.hours:,.1f}", cost=best.cost,
                  periods=best.periods, term=phrase(best.term))
    why = listed(reasons)
    if best.kind == "bare_metal":
        return listed([head, phrase("; bare metal, because {why}.", why=why) if reasons
                       else phrase("; bare metal is the cheapest here, jitter risk included.")],
                      "")
    said = [head, phrase("; a container is the cheapest even with the neighbour-jitter risk "
                         "priced in ({planned} h planned, {expected} h expected).",
                         planned=f"{best.nominal_hours:,.0f}", expected=f"{best.hours:,.0f}")]
    metal = next((o for o in options if o.kind == "bare_metal"), None)
    if reasons and metal is not None:
        said.append(phrase(" For a predictable finish take bare metal: {nodes} × {sku} in "
                           "{region}, about {hours} h, ¥{cost:,.2f}, because {why}.",
                           nodes=metal.nodes, sku=metal.sku, region=metal.region,
                           hours=f"{metal.hours:,.0f}", cost=metal.cost, why=why))
    return listed(said, "")


@dataclass(frozen=True)
class JitterCase:
    planned_hours: float
    container_hours: float
    bare_metal_hours: float


def seeds_jitter_case(a: Assumptions = Assumptions()) -> JitterCase:
    """The seeds' worked example from the stated assumptions: 96 h planned on a shared
    RTX 4090 container; expected 140 h there, 89 h on bare metal."""
    planned = 96.0
    return JitterCase(planned, planned * (1 + a.jitter(planned)),
                      planned / (1 + a.container_overhead))

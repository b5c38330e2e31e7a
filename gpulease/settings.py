"""One validated settings object, read from GPULEASE_* environment variables."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpulease.db.limits import SessionLimits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPULEASE_", extra="ignore")

    data_dir: Path = Path(".gpulease")
    # Empty means SQLite in data_dir; PostgreSQL: postgresql+psycopg://user@host/db
    database_url: str = ""
    # Fernet key for secrets at rest (BMC and root passwords). Empty: a key file in data_dir.
    secret_key: str = ""
    catalog_file: Path | None = None

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    # How servers and their BMCs reach this control plane (config drives, the agent)
    public_url: str = "http://127.0.0.1:8000"
    # Where the console's forms may come from besides the address the request reached (a
    # proxy that rewrites Host, as nginx does by default): origins such as
    # https://gpu.example.com, a JSON list; empty: the public URL's.
    console_origins: list[str] = Field(default_factory=list)
    # Proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (client address for
    # rate limits and audit, https for secure cookies): addresses or CIDRs, comma-separated,
    # or "*" (uvicorn's forwarded_allow_ips).
    forwarded_allow_ips: str = "127.0.0.1"
    # Where nodes fetch OS images and the agent ramdisk (served by the control plane)
    media_base_url: str = "http://127.0.0.1:8000/media"
    # How the servers themselves reach the control plane once booted (their agent, the
    # deploy ramdisk), where that differs from public_url (which their BMCs use): the
    # lab's VMs under QEMU's user-mode network see the host's loopback as 10.0.2.2, so
    # `gpulease up --lab` sets http://10.0.2.2:<port>. Empty: public_url.
    guest_url: str = ""
    # Image-based deploys (offers with deploy = "image"): the images `gpulease image build`
    # made, served to the deploy ramdisk at <guest_url>/media/images/<image>.raw, and the
    # deploy ramdisk's kernel and ISOs (one per boot, its plan's address on its command
    # line) under ramdisk/ there.
    image_store: Path = Path("/var/tmp/gpulease-images")

    # Redfish BMCs
    bmc_timeout_s: float = Field(default=10.0, gt=0)
    bmc_verify_tls: bool = True

    # PostgreSQL session limits, set by every connection as it opens. A statement that waits
    # longer than db_lock_timeout_s for a row lock gives up (the API answers 503 with
    # Retry-After; the worker retries); the server ends a session that keeps a transaction
    # open and idle longer than db_idle_in_transaction_timeout_s (a frozen worker, a stalled
    # network), and its row locks go with it: keep it below lock_ttl_s, so they are gone
    # before another worker takes the frozen worker's rows over. TCP keepalives notice a
    # dead peer in idle + interval x count seconds. SQLite waits for its write lock instead
    # (busy timeout 60 s): one host, one writer at a time.
    db_lock_timeout_s: float = Field(default=10.0, gt=0)
    db_statement_timeout_s: float = Field(default=60.0, gt=0)
    db_idle_in_transaction_timeout_s: float = Field(default=15.0, gt=0)
    db_keepalives_idle_s: int = Field(default=10, ge=1)
    db_keepalives_interval_s: int = Field(default=5, ge=1)
    db_keepalives_count: int = Field(default=3, ge=1)
    db_connect_timeout_s: int = Field(default=5, ge=1)
    # `serve`, `worker` and `up` wait this long for the database at start (backing off),
    # then exit with a one-line reason.
    db_wait_s: float = Field(default=60.0, ge=0)
    # Connections each process keeps open, and how many more it may open at a peak
    # (PostgreSQL: processes × (size + overflow) must stay under max_connections).
    db_pool_size: int = Field(default=20, ge=1, le=1000)
    db_pool_overflow: int = Field(default=20, ge=0, le=1000)
    # SQLite only: read transactions one process runs at once; its other threads queue for
    # a turn (writes go one at a time). Threads reading at once take turns at Python's lock
    # row by row and cost about twice the CPU (bench/list_threads.py); 0: reads do not queue.
    sqlite_read_slots: int = Field(default=2, ge=0, le=1000)
    # The stock the catalog shows (API and console) is read again when this process has
    # committed a change to nodes, GPUs or allocations, and at least this often for the
    # changes of other processes (several API processes, a separate worker); 0: every
    # request reads it. An order always counts what is free when it is placed.
    catalog_stock_max_age_s: float = Field(default=1.0, ge=0, le=60)
    # Requests an API process works on at once in its threads (every synchronous route;
    # streams and probes run on its event loop); the rest wait their turn. Python runs one
    # thread at a time, so past a few, more threads only take turns at the interpreter's
    # lock and hold more database connections (in one run each under 24 clients, 8 threads
    # served more requests/s than Starlette's 40 on the list, catalog and one instance in
    # all four set-ups, 16 in three of four: bench/README.md). Keep it under db_pool_size;
    # an enrollment waits on its BMCs in one of these threads, so leave room for a batch.
    api_threads: int = Field(default=16, ge=1, le=1000)
    # Apply pending migrations when a process starts (under a lock); false: only
    # `gpulease migrate` does, and a process finding the schema behind refuses to start.
    migrate_at_start: bool = True
    # Logs: one line per request (method, path, status, time, request id, actor) and per
    # lifecycle transition, at INFO; `text`, or `json` lines for a log pipeline. `up`
    # logs at WARNING unless the level is set (its terminal stays readable).
    log_level: str = Field(default="INFO", pattern=r"^(?i:debug|info|warning|error)$")
    log_format: str = Field(default="text", pattern=r"^(text|json)$")
    # /metrics answers this bearer token (besides operators' API tokens); /readyz is 503
    # while no worker is alive unless this is false.
    metrics_token: str = ""
    # A worker's own /metrics (0: none): the database's view plus its BMC errors by kind
    # and periodic job runs, behind metrics_token when set.
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    worker_metrics_host: str = "127.0.0.1"
    # On first start with no operator yet: make one with this e-mail and write its
    # (expiring) token to <data_dir>/operator.token, 0600.
    bootstrap_operator_email: str = ""

    # API tokens live at most this many days; a token that never expires only when allowed.
    token_max_days: int = Field(default=365, ge=1, le=3650)
    allow_unexpiring_tokens: bool = False
    # Rate limits (429 with Retry-After): requests a minute per token or console session,
    # and per source address without one; requests with bad tokens a minute per address,
    # above which that address waits; console sign-in attempts per address, and wrong
    # passwords per account and address, per 15 minutes. Counted in memory (one process),
    # in the database (PostgreSQL: several API processes), or in Redis when a URL is set.
    rate_limit_per_token_per_min: int = Field(default=1200, ge=1)
    rate_limit_anonymous_per_min: int = Field(default=300, ge=1)
    rate_limit_auth_failures_per_min: int = Field(default=30, ge=1)
    sign_in_attempts_per_address: int = Field(default=30, ge=1)
    sign_in_failures_per_account: int = Field(default=5, ge=1)
    rate_limit_store: Literal["auto", "memory", "database", "redis"] = "auto"
    redis_url: str = ""

    # Audit rows older than this are pruned from the start of the chain.
    audit_retention_days: int = Field(default=400, ge=1)
    # GPU telemetry: per-window (about a minute) summaries are kept this long, then merged
    # into one summary per GPU and hour, kept for the second setting.
    telemetry_minute_days: int = Field(default=7, ge=1)
    telemetry_hour_days: int = Field(default=90, ge=1)
    # A GPU is idle while its mean utilisation is under this (the idle view, instance.idle)
    idle_util_pct: float = Field(default=5.0, ge=0, le=100)
    # Told (instance.idle) when its GPUs were idle this share of a day, at most once a day
    idle_notice_share: float = Field(default=0.95, gt=0, le=1)
    # What one node's agent may store a day (UTC) in telemetry, as the summaries' JSON: an
    # 8-GPU server pushing every minute stores about 9 MB; past this a push answers 429
    # until the next day, and the refusal is counted for the operator.
    agent_push_bytes_per_day: int = Field(default=64 * 2**20, ge=4096)
    # The deploy circuit breaker: it opens when this many deploys in a row (within the
    # window) failed the same way; while open, a failing deploy is retried every retry_s
    # instead of sending its node to maintenance.
    breaker_failures: int = Field(default=5, ge=2)
    breaker_window_s: float = Field(default=1800.0, gt=0)
    breaker_retry_s: float = Field(default=300.0, gt=0)
    # How often each process looks for a newly published catalog (`gpulease catalog reload`).
    catalog_follow_s: float = Field(default=5.0, gt=0, le=3600)
    # batch: a request answers while a writer thread appends its row with those of others
    # (milliseconds later); sync: its row is committed before the answer leaves.
    audit_write: Literal["batch", "sync"] = "batch"
    # The largest request body the API reads (413 above it).
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=256 * 1024 * 1024)

    # Provisioning engine
    worker_threads: int = Field(default=4, ge=1, le=64)
    # The site (data centre, catalog [[sites]]) whose servers this worker serves; unset:
    # every site that has never had a worker of its own (services/platform/sites.py).
    worker_site: str | None = Field(default=None, pattern=r"^[a-z0-9-]+$", max_length=64)
    lock_ttl_s: float = Field(default=30.0, gt=0)
    # A worker whose host clock is off from the database's (PostgreSQL) by more than this
    # says so and claims nothing until they agree (lock expiry is compared across hosts).
    max_clock_skew_s: float = Field(default=5.0, gt=0)
    poll_interval_s: float = Field(default=0.5, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    backoff_base_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=60.0, ge=0)
    stage_timeout_s: float = Field(default=900.0, gt=0)
    # A swap's direct copy: the faulty server's agent serves its data disk on this port to
    # the spare's agent (between the provider's servers; agent/copy.py), for at most
    # copy_wait_s (the spare's deployment and the copy itself).
    copy_port: int = Field(default=9477, ge=1, le=65535)
    copy_wait_s: float = Field(default=6 * 3600.0, gt=0, le=7 * 86400)
    # How often the BMC's health and logs are read for a node that is rented or in a
    # pipeline (critical GPU, memory, PSU and thermal entries become hardware alerts).
    bmc_log_interval_s: float = Field(default=300.0, gt=0)
    # Where the BMC offers an event service, it is asked to push its alerts to
    # <public_url>/api/v1/bmc-events/<node>; such a node is then read on this slower
    # schedule (the health rollup, events lost on the way, a dropped subscription).
    bmc_events: bool = True
    bmc_log_interval_subscribed_s: float = Field(default=3600.0, gt=0)
    # SLA credits of one lease period never exceed this many times the period's price.
    sla_credit_cap: Decimal = Field(default=Decimal("1"), ge=0, le=10, max_digits=6,
                                    decimal_places=3)
    # An instance's on-demand acceptance run: one at a time, and at most this often.
    verify_min_interval_s: float = Field(default=300.0, ge=0)
    # A node that fails during delivery is replaced by a free one this many times per order.
    max_node_moves: int = Field(default=2, ge=0)
    delivery_sla_s: float = Field(default=900.0, gt=0)
    # After a lease ends the machine stays this long (flagged) before it is erased.
    lease_grace_days: float = Field(default=3.0, ge=0)
    # Spending bounded by the wallet (services/money/spending.py): metered usage that takes a
    # tenant past balance + credit limit is warned at once; after this many hours without a
    # top-up its containers stop and its bare metal is flagged to the operator, and orders
    # are refused. A warning when the balance covers fewer hours of running containers.
    overdraft_grace_hours: float = Field(default=24.0, ge=0)
    low_balance_hours: float = Field(default=24.0, ge=0)
    # Dunning: reminders of an unpaid invoice this many days after it was finalized; past
    # the last limit, the tenant's new orders are refused until it is paid.
    dunning_reminder_days: list[int] = Field(default_factory=lambda: [0, 7, 14])
    dunning_suspend_days: int = Field(default=30, ge=1)
    # Lease reminders by e-mail to the tenant's admins; empty host: e-mail is not sent.
    # Where the platform may send on a tenant's behalf (services/platform/egress.py): networks or
    # host names allowed beyond public addresses, and the provider's own networks refused.
    # JSON lists, e.g. GPULEASE_EGRESS_ALLOW='["10.20.0.0/16", "hooks.internal"]'.
    egress_allow: list[str] = Field(default_factory=list)
    egress_deny: list[str] = Field(default_factory=list)
    smtp_host: str = ""
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_from: str = "gpulease@localhost"
    smtp_starttls: bool = False
    smtp_username: str = ""
    smtp_password: str = ""
    # Object storage (tenants' buckets): any S3 with an IAM API. Empty endpoint: `up` runs
    # SeaweedFS under the data directory; `serve` has no object storage until it is set.
    s3_endpoint: str = ""
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_region: str = "us-east-1"
    s3_public_endpoint: str = ""  # what tenants are told to use; default: s3_endpoint
    # Each tenant's bucket: what it may hold (an operator sets another per tenant), and
    # what is free before the catalog's `object-storage` price per GB-month applies (GB
    # of 10^9 bytes, measured once a day).
    storage_quota_gb: float = Field(default=1000.0, gt=0)
    storage_free_gb: float = Field(default=100.0, ge=0)
    # How often each bucket is measured against its quota; past it, the store refuses the
    # tenant's writes until it is under again (services/storage/quota.py).
    storage_quota_check_s: float = Field(default=300.0, gt=0)
    # Operators' notices (new P1 tickets, SLA clocks at risk) as a signed webhook too (your
    # paging or chat bridge), besides e-mail to every operator; the secret signs them.
    operator_webhook_url: str = ""
    operator_webhook_secret: str = ""
    # Who else hears of a ticket whose SLA clock breached (JSON list of e-mail addresses,
    # e.g. the duty manager's), besides every operator and their webhook.
    escalation_emails: list[str] = Field(default_factory=list, max_length=20)
    # UEFI HTTP boot: the URL a BMC passes to the firmware (e.g. your iPXE EFI binary that
    # chains to <public_url>/media/ipxe?mac=${net0/mac}); empty: the firmware asks DHCP.
    http_boot_uri: str = ""
    # Network boot: the networks a booting server asks from (CIDRs, JSON list). The iPXE
    # script and NoCloud seed refuse any other address; a node with a boot address set at
    # enrollment is served only there. The default, loopback, fits the demo alone.
    boot_networks: list[str] = Field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])
    # The platform's calendar (an IANA zone): lease periods, renewals and reminders, invoice
    # months and the dates tenants read are counted on its wall clock.
    time_zone: str = "Asia/Shanghai"
    # Invoices: drafted for the past month on its 1st, finalized on this day of the month
    # (the days between leave time for usage reported late); the issuer printed on them.
    invoice_finalize_day: int = Field(default=3, ge=1, le=28)
    invoice_issuer: str = "gpulease operator"
    invoice_issuer_tax_id: str = ""
    # Container instances on shared servers' Docker engines: the image of a catalog image
    # id is `<prefix><id>` unless mapped (JSON, e.g. {"ubuntu22.04-cuda12.4-pytorch2.5":
    # "registry.local/pytorch:2.5-cuda12.4"}). GPUs go to containers through the NVIDIA
    # container toolkit; "none" starts them without GPUs (engines of test rigs).
    container_image_prefix: str = "gpulease/"
    container_images: dict[str, str] = Field(default_factory=dict)
    container_gpus: Literal["nvidia", "none"] = "nvidia"
    docker_tls_dir: str = ""  # ca.pem, cert.pem, key.pem for tcp:// engines with TLS
    # Saved environments (`gpulease image save`): the registry the engines push tenants'
    # images to and pull them from (host:port, e.g. 127.0.0.1:5000 for Debian's
    # docker-registry; reachable by the engines, never by tenants). Empty: containers on
    # real engines cannot be saved (the demo's simulated hosts need none).
    registry: str = ""

    # The worker's periodic jobs (worker/schedule.py): each runs on its own thread every
    # sweep_interval_s (or its own setting); one that asks BMCs, agents or stores asks at
    # most job_io_concurrency at once and starts no call after job_budget_s (the rest wait
    # for its next run).
    sweep_interval_s: float = Field(default=5.0, gt=0, le=3600)
    job_io_concurrency: int = Field(default=8, ge=1, le=256)
    job_budget_s: float = Field(default=60.0, gt=0, le=3600)
    # Simulated hardware: the demo fleet's BMCs, stand-in node agents and container hosts
    # (drivers/simulated.py). `gpulease up` turns it on; off, a process builds only the
    # real drivers (Redfish, Docker, the node agent's command queue), and a node enrolled
    # with a simulated BMC fails its steps saying so.
    simulated_hardware: bool = False
    # Demo fleet (simulated hardware)
    demo_delay_s: float = Field(default=2.0, ge=0)
    # Round-trip time of every simulated BMC/agent call (real BMCs answer in 0.1-2 s).
    demo_call_latency_s: float = Field(default=0.0, ge=0)
    # The demo's Redfish emulator: power changes land after a random 1-11 s as slow BMCs
    # do, or after exactly this many seconds.
    demo_bmc_power_delay_s: int | None = Field(default=None, ge=0, le=60)
    demo_nodes_per_offer: int = Field(default=4, ge=0)

    @field_validator("catalog_file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """An empty GPULEASE_CATALOG_FILE is unset (the shipped catalog), not the current
        directory."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if value and not value.startswith(("sqlite", "postgresql")):
            raise ValueError(
                "GPULEASE_DATABASE_URL must start with sqlite:// or postgresql+psycopg://"
            )
        return value

    @model_validator(mode="after")
    def _own_address(self) -> Settings:
        """Unless given, the URLs servers and BMCs reach the control plane at are its own
        listening address (`up --port 9000` writes config drives for port 9000)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        base = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        if "public_url" not in self.model_fields_set:
            self.public_url = base
        if "media_base_url" not in self.model_fields_set:
            self.media_base_url = f"{self.public_url.rstrip('/')}/media"
        if not self.guest_url:
            self.guest_url = self.public_url
        return self

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"GPULEASE_TIME_ZONE must name an IANA time zone such as "
                             f"Asia/Shanghai or UTC, not {value!r}") from None
        return value

    @property
    def zone(self) -> ZoneInfo:
        """The platform's calendar: lease periods, invoice months, dates shown."""
        return ZoneInfo(self.time_zone)

    def container_image(self, image_id: str) -> str:
        return self.container_images.get(image_id) or f"{self.container_image_prefix}{image_id}"

    def session_limits(self) -> SessionLimits:
        return SessionLimits(
            lock_timeout_s=self.db_lock_timeout_s, statement_timeout_s=self.db_statement_timeout_s,
            idle_in_transaction_timeout_s=self.db_idle_in_transaction_timeout_s,
            keepalives_idle_s=self.db_keepalives_idle_s,
            keepalives_interval_s=self.db_keepalives_interval_s,
            keepalives_count=self.db_keepalives_count, connect_timeout_s=self.db_connect_timeout_s)

    def resolved_database_url(self) -> str:
        if self.database_url:
            if self.database_url.startswith("postgresql://"):
                return "postgresql+psycopg://" + self.database_url.removeprefix("postgresql://")
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'gpulease.db').resolve()}"


SECRET_FIELDS = ("secret_key", "smtp_password", "metrics_token", "operator_webhook_secret",
                 "s3_secret_key")


def effective(settings: Settings) -> dict[str, object]:
    """Every setting as this process sees it, secrets masked (`gpulease config`)."""
    from gpulease.db.session import safe_url

    shown: dict[str, object] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if name in SECRET_FIELDS:
            value = "(set)" if value else "(not set)"
        elif name.endswith("_url") and isinstance(value, str) and "@" in value:
            value = safe_url(value)
        shown[f"GPULEASE_{name.upper()}"] = value
    return shown

"""The node agent port: the software on a booted server that configures, verifies and
erases it. Two kinds answer it, through the same methods:

- the stand-in agents of simulated servers (drivers/simulated.py), which answer at once;
- the real `gpulease agent` (services/agents/commands.py): the first call of a pipeline
  stage files a command, later calls find its result; until the agent has posted it, the
  call returns a `Pending` and the step waits.

The wire protocol with the real agent is the pydantic models below: the commands the
agent fetches (GET /api/v1/agent/commands) and the results it posts back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpulease.domain.fleet.acceptance import Check, GpuSpec, Report, Thresholds
from gpulease.domain.phrases import well_formed
from gpulease.ports.bmc import BmcEndpoint


class AgentError(Exception):
    retryable = True


@dataclass(frozen=True)
class NodeRef:
    """Which server an agent call is about (and its BMC, for agents that watch it), and
    which pipeline stage asks (None: an operator or tenant asks on demand)."""

    node_id: str
    name: str
    bmc_driver: str
    endpoint: BmcEndpoint
    instance_id: str | None = None
    stage: str | None = None
    stage_started_at: datetime | None = None


@dataclass(frozen=True)
class Pending:
    """Asked; the answer comes later. The step waits and asks again."""

    reference: str | None = None  # the command filed, when there is one


@dataclass(frozen=True)
class NodeConfig:
    hostname: str
    ssh_keys: tuple[str, ...]
    root_password: str  # sent over the agent's authenticated channel; never logged
    data_disk_mount: str = "/data"  # "": left unformatted for the tenant's LUKS2 key


# --- results -------------------------------------------------------------------------------

class ConfigureResult(BaseModel):
    """A configured server: the address its tenant will use."""

    model_config = ConfigDict(extra="ignore")
    ip_address: str = Field(min_length=1, max_length=64)
    hostname: str | None = Field(default=None, max_length=255)
    cloud_init: str | None = Field(default=None, max_length=200)
    # of the order's SSH keys, how many root's authorized_keys lacks once the agent wrote
    # them (None: not checked, no cloud-init on the server)
    keys_missing: int | None = Field(default=None, ge=0)


class CheckResult(BaseModel):
    name: str = Field(max_length=100)
    passed: bool | None
    value: float | None = None
    unit: str = Field(default="", max_length=32)
    threshold: str = Field(default="", max_length=200)
    gpu: int | None = Field(default=None, ge=0, le=64)
    detail: str = Field(default="", max_length=2000)
    # threshold and detail as phrases, for the reader's language (an agent's own: checked
    # to be plain templates, else dropped and the English shown)
    phrases: dict[str, Any] = Field(default_factory=dict)

    @field_validator("phrases")
    @classmethod
    def _plain_phrases(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in value.items()
                if k in ("threshold", "detail") and well_formed(v)}


class VerifyResult(BaseModel):
    """The acceptance suite's judged report, as the agent posts it."""

    model_config = ConfigDict(extra="ignore")
    passed: bool
    checks: list[CheckResult] = Field(default_factory=list, max_length=2000)
    simulated: bool = False
    driver_version: str | None = Field(default=None, max_length=64)
    cuda_version: str | None = Field(default=None, max_length=64)
    notes: list[str] = Field(default_factory=list, max_length=100)

    @classmethod
    def of(cls, report: Report) -> VerifyResult:
        return cls.model_validate(report.as_dict())

    def report(self) -> Report:
        return Report(passed=self.passed, checks=tuple(Check(**c.model_dump())
                                                       for c in self.checks),
                      simulated=self.simulated, driver_version=self.driver_version,
                      cuda_version=self.cuda_version, notes=tuple(self.notes))


class EraseResult(BaseModel):
    """One certificate per erased disk (agent/erase.Certificate.as_dict(), sealed with its
    digest)."""

    model_config = ConfigDict(extra="ignore")
    certificates: list[dict[str, Any]] = Field(default_factory=list, max_length=256)
    method: str = "node agent"
    simulated: bool = False

    @property
    def devices(self) -> list[str]:
        return [str(c.get("device", "?")) for c in self.certificates]


class TransferResult(BaseModel):
    """A backup's snapshot, or a restore's, with its figures (agent/backup.py)."""

    model_config = ConfigDict(extra="ignore")
    snapshot_id: str = Field(min_length=1, max_length=64)
    files: int = Field(ge=0)
    bytes_total: int = Field(ge=0)
    bytes_moved: int = Field(ge=0)  # sent (a backup: only what the bucket lacked) or read
    seconds: float = Field(ge=0)
    simulated: bool = False
    # What the source side left out (links, special files, files it could not read), by
    # path: told to the tenant with the run's end. Bounded: the agent's word.
    skipped: list[Annotated[str, Field(max_length=1024)]] = Field(default_factory=list,
                                                                  max_length=1000)


# --- commands, as the real agent fetches them ------------------------------------------------

class ConfigurePayload(BaseModel):
    hostname: str
    ssh_keys: list[str]
    # bcrypt, made by the control plane; None: root's password left as it is (locked)
    root_password_hash: str | None = Field(default=None, max_length=200)


class VerifyPayload(BaseModel):
    thresholds: Thresholds
    spec: GpuSpec


class ErasePayload(BaseModel):
    lease: str | None = None


class BackupPayload(BaseModel):
    """Where the agent sends a directory of its data disk (or restores one from): the
    tenant's bucket, with a key minted for this run and deleted after it."""

    endpoint: str
    bucket: str
    prefix: str
    access_key_id: str
    secret_access_key: str
    path: str  # on the server, under its data disk
    max_mbps: float | None = None


class RestorePayload(BackupPayload):
    snapshot_id: str


class SendPayload(BaseModel):
    """A swap's copy, the faulty server's side: serve a directory of its data disk to the
    one peer that holds `key` (agent/copy.py), until that peer says it has everything or
    `wait_s` pass."""

    copy_id: str = Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    path: str  # on the server, under its data disk
    port: int = Field(ge=1, le=65535)
    key: str = Field(min_length=43, max_length=44)  # 32 bytes, URL-safe base64
    wait_s: float = Field(gt=0, le=7 * 86400)


class ReceivePayload(SendPayload):
    """The spare's side: fetch the directory from `source`:`port` into the same path,
    each file verified before it takes its place."""

    source: str = Field(min_length=1, max_length=255)  # the faulty server's address


class _Message(BaseModel):
    id: str
    instance_id: str | None = None


class ConfigureCommand(_Message):
    kind: Literal["configure"] = "configure"
    payload: ConfigurePayload


class VerifyCommand(_Message):
    kind: Literal["verify"] = "verify"
    payload: VerifyPayload


class EraseCommand(_Message):
    kind: Literal["erase"] = "erase"
    payload: ErasePayload


class BackupCommand(_Message):
    kind: Literal["backup"] = "backup"
    payload: BackupPayload


class RestoreCommand(_Message):
    kind: Literal["restore"] = "restore"
    payload: RestorePayload


class SendCommand(_Message):
    kind: Literal["send"] = "send"
    payload: SendPayload


class ReceiveCommand(_Message):
    kind: Literal["receive"] = "receive"
    payload: ReceivePayload


Command = Annotated[ConfigureCommand | VerifyCommand | EraseCommand | BackupCommand
                    | RestoreCommand | SendCommand | ReceiveCommand,
                    Field(discriminator="kind")]
TransferPayload = BackupPayload | RestorePayload | SendPayload | ReceivePayload
Payload = ConfigurePayload | VerifyPayload | ErasePayload | TransferPayload
COMMAND_KINDS: dict[type[BaseModel], str] = {
    ConfigurePayload: "configure", VerifyPayload: "verify", ErasePayload: "erase",
    BackupPayload: "backup", RestorePayload: "restore", SendPayload: "send",
    ReceivePayload: "receive"}
Result = ConfigureResult | VerifyResult | EraseResult | TransferResult
RESULTS: dict[str, type[Result]] = {
    "configure": ConfigureResult, "verify": VerifyResult, "erase": EraseResult,
    "backup": TransferResult, "restore": TransferResult, "send": TransferResult,
    "receive": TransferResult}


class CommandProgress(BaseModel):
    """How far a long command (a backup, a restore) has come, posted while it runs."""

    moved: int = Field(ge=0)  # bytes moved so far
    total: int = Field(ge=0)  # bytes it will move


class CommandOutcome(BaseModel):
    """What the agent posts back for one command."""

    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = Field(default=None, max_length=4000)


# --- the port ------------------------------------------------------------------------------

class Agent(Protocol):
    simulated: bool  # its reports and certificates say simulated
    # Its cleaning ramdisk boots with a config drive carrying a one-time enrollment token.
    enrolls_from_config_drive: bool

    def is_up(self, node: NodeRef) -> bool:
        """True once the node's agent has called in since its last boot (since the stage
        began, for a pipeline stage)."""
        ...

    def configure(self, node: NodeRef, config: NodeConfig) -> ConfigureResult | Pending:
        """Data disk, keys and password applied; the address. Raises AgentError."""
        ...

    def erase(self, node: NodeRef, lease: str | None = None) -> EraseResult | Pending:
        """Erase every tenant-writable disk and certify each. Raises AgentError."""
        ...

    def verify(self, node: NodeRef, thresholds: Thresholds, spec: GpuSpec
               ) -> Report | Pending:
        """Run the acceptance suite on the node and return its judged report."""
        ...

    def transfer(self, node: NodeRef, payload: TransferPayload,
                 progress: Callable[[int, int], None] | None = None
                 ) -> TransferResult | Pending:
        """Back a directory of the data disk up to the tenant's bucket (BackupPayload),
        restore a snapshot into it (RestorePayload), or copy it straight from one server to
        another (SendPayload on the source, ReceivePayload on the destination; each answers
        once the destination has every file). `node.stage` names the run (its
        backup's id), so that later calls find the work it filed. An agent that answers
        within the call reports (bytes moved, bytes to move) through `progress`; the real
        agent posts it to its command instead. Raises AgentError."""
        ...

"""Node agents phone home here; tenants read telemetry, acceptance reports and erase
certificates of their instances."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from gpulease.api.access import EVERY_USER, ORDERING, TENANT_USERS, Caller, access
from gpulease.api.deps import Limit, Offset, PlatformDep, PrincipalDep
from gpulease.ports.agent import Command, CommandOutcome, CommandProgress
from gpulease.schemas import IdleView, Page
from gpulease.services.agents import (
    commands as agent_commands,
)
from gpulease.services.agents import credentials as agent_credentials
from gpulease.services.agents import evidence
from gpulease.services.agents import (
    node_agent as node_agents,
)
from gpulease.services.agents.node_agent import VerifyRun
from gpulease.services.fleet import bmc_health
from gpulease.services.telemetry import idle, pushes
from gpulease.services.telemetry import series as telemetry_series

router = APIRouter(tags=["node agents"])


class RegisterRequest(BaseModel):
    token: str = Field(description="one-time enrollment token (glat_...)")
    hostname: str = Field(min_length=1, max_length=200)
    address: str | None = Field(default=None, max_length=300,
                                description="HOST:PORT where the agent's /metrics listens")
    inventory: dict[str, Any] | None = None


class RegisterResponse(BaseModel):
    node_id: str
    credential: str = Field(description="the agent's credential (glan_...); shown once")


class TelemetryPush(BaseModel):
    gpus: list[dict[str, Any]] = Field(max_length=16, description="GPU summaries, as the "
                                       "agent's /v1/summary returns them (at most 16)")


agent_scheme = HTTPBearer(auto_error=False, scheme_name="agentCredential", description=(
    "A node agent's credential (glan_…), traded for its one-time enrollment token."))
AgentCredential = Annotated[HTTPAuthorizationCredentials | None, Security(agent_scheme)]


def _bearer(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return credentials.credentials.strip() if credentials is not None else None


@router.post("/agent/register", response_model=RegisterResponse, status_code=201,
             openapi_extra=access(Caller.ANYONE))
def register(body: RegisterRequest, p: PlatformDep) -> RegisterResponse:
    """Trade the one-time token from the config drive for the agent's own credential."""
    node_id, credential = agent_credentials.register(p, body.token, body.hostname, body.address,
                                          body.inventory)
    return RegisterResponse(node_id=node_id, credential=credential)


@router.post("/agent/telemetry", status_code=202, openapi_extra=access(Caller.AGENT))
def push_telemetry(body: TelemetryPush, credential: AgentCredential, p: PlatformDep
                   ) -> dict[str, Any]:
    """A window of GPU summaries from an agent; answers with the alerts it raises."""
    return {"alerts": pushes.ingest(p, _bearer(credential), body.gpus)}


@router.post("/bmc-events/{node_id}", status_code=202, tags=["BMC events"],
             openapi_extra=access(Caller.ANYONE))
def bmc_events(node_id: str, body: dict[str, Any], p: PlatformDep) -> dict[str, int]:
    """A node's BMC pushes its events here (a Redfish Event, as its EventService sends
    them). Accepted only with the Context of the subscription the platform made; critical
    GPU, memory, power-supply and thermal records open hardware alerts."""
    return {"alerts": bmc_health.receive_events(p, node_id, body)}


@router.get("/agent/commands", response_model=list[Command], openapi_extra=access(Caller.AGENT))
def agent_commands_pending(credential: AgentCredential, p: PlatformDep) -> list[Command]:
    """The agent's pending work (configure, verify, erase), marked running. Also a
    heartbeat."""
    return agent_commands.fetch(p, _bearer(credential))


@router.post("/agent/commands/{command_id}/result", status_code=204,
             openapi_extra=access(Caller.AGENT))
def agent_command_result(command_id: str, body: CommandOutcome, credential: AgentCredential,
                         p: PlatformDep) -> None:
    """The outcome of one command: `result` as the command's kind defines it (configure:
    ip_address; verify: the judged report; erase: one certificate per disk)."""
    agent_commands.post_result(p, _bearer(credential), command_id, body)


@router.post("/agent/commands/{command_id}/progress", status_code=204,
             openapi_extra=access(Caller.AGENT))
def agent_command_progress(command_id: str, body: CommandProgress,
                           credential: AgentCredential, p: PlatformDep) -> None:
    """How far a long command (a backup, a restore) has come: bytes moved of bytes to
    move. Shown on the run while it goes on."""
    agent_commands.post_progress(p, _bearer(credential), command_id, body)


@router.post("/instances/{instance_id}/verify", status_code=202,
             openapi_extra=access(*ORDERING, owned=True))
def verify_instance(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> list[VerifyRun]:
    """Run the acceptance suite again on the instance's nodes; reports appear under
    /acceptance (at once for stand-in agents, when the node's agent answers otherwise)."""
    return node_agents.verify_now(p, actor, instance_id)


@router.get("/instances/{instance_id}/metrics", openapi_extra=access(*EVERY_USER, owned=True))
def instance_metrics(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> dict[str, Any]:
    """Latest GPU telemetry summary per GPU of the instance, and its open hardware alerts."""
    return pushes.instance_metrics(p, actor, instance_id)


@router.get("/instances/{instance_id}/idle", response_model=IdleView,
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_idle(instance_id: str, p: PlatformDep, actor: PrincipalDep) -> IdleView:
    """The share of the last hour and day the instance's GPUs, together and each, were
    idle (utilisation under GPULEASE_IDLE_UTIL_PCT), from the platform's telemetry."""
    return idle.instance_idle(p, actor, instance_id)


@router.get("/idle", response_model=Page[IdleView], openapi_extra=access(*TENANT_USERS))
def tenant_idle(p: PlatformDep, actor: PrincipalDep, limit: Limit = 100, offset: Offset = 0
                ) -> Page[IdleView]:
    """Your delivered instances with their idle shares, the most idle over the day first,
    a page at a time."""
    return Page[IdleView].of(idle.tenant_idle(p, actor), limit, offset)


@router.get("/instances/{instance_id}/telemetry",
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_telemetry(instance_id: str, p: PlatformDep, actor: PrincipalDep,
                       hours: Annotated[int, Query(description="1, 24 or 168")] = 24
                       ) -> dict[str, Any]:
    """Each GPU's telemetry over the last hour (per minute), day (per 5 minutes) or week
    (per 15 minutes): `t` (Unix seconds) and one array per metric (`temp_max_c`,
    `sm_clock_max_mhz`, `sm_clock_min_mhz`, `power_avg_w`, `util_avg_pct`,
    `fb_used_max_mib`), with throttling and XID `events` per node."""
    return telemetry_series.instance_series(p, actor, instance_id, hours)


@router.get("/instances/{instance_id}/acceptance", response_model=Page[dict[str, Any]],
            openapi_extra=access(*EVERY_USER, owned=True))
def instance_acceptance(instance_id: str, p: PlatformDep, actor: PrincipalDep,
                        limit: Limit = 100, offset: Offset = 0) -> Page[dict[str, Any]]:
    """The acceptance reports run for the instance's nodes (JSON and readable summary),
    oldest first, a page at a time."""
    return Page[dict[str, Any]](
        items=evidence.acceptance_reports(p, actor, instance_id, limit, offset),
        total=evidence.count_acceptance_reports(p, actor, instance_id), limit=limit,
        offset=offset)


@router.get("/instances/{instance_id}/erase-certificates",
            response_model=Page[dict[str, Any]], openapi_extra=access(*EVERY_USER, owned=True))
def instance_certificates(instance_id: str, p: PlatformDep, actor: PrincipalDep,
                          limit: Limit = 100, offset: Offset = 0) -> Page[dict[str, Any]]:
    """One NIST SP 800-88 erase certificate per disk the instance's nodes held, oldest
    first, a page at a time."""
    items, total = evidence.instance_certificates(p, actor, instance_id, limit, offset)
    return Page[dict[str, Any]](items=items, total=total, limit=limit, offset=offset)


@router.get("/erase-certificates/{certificate_id}", openapi_extra=access(*EVERY_USER, owned=True))
def certificate(certificate_id: str, p: PlatformDep, actor: PrincipalDep) -> dict[str, Any]:
    return evidence.certificate(p, actor, certificate_id)


@router.get("/nodes/{node_id}/erase-certificates", tags=["nodes (operator)"],
            response_model=Page[dict[str, Any]], openapi_extra=access(Caller.OPERATOR))
def node_certificates(node_id: str, p: PlatformDep, actor: PrincipalDep,
                      limit: Limit = 100, offset: Offset = 0) -> Page[dict[str, Any]]:
    """The node's erase certificates over its life, newest first, a page at a time."""
    return evidence.node_certificates(p, actor, node_id, limit, offset)


@router.post("/nodes/{node_id}/agent-token", status_code=201, tags=["nodes (operator)"],
             openapi_extra=access(Caller.OPERATOR))
def agent_token(node_id: str, p: PlatformDep, actor: PrincipalDep) -> dict[str, str]:
    """A one-time enrollment token for the node's agent (valid 24 hours), shown once."""
    return {"token": agent_credentials.operator_enrollment(p, actor, node_id)}

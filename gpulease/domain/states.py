"""Every lifecycle of the platform, declared: node status and deploy/clean stage, instance
status and stage, lease, invoice, usage record, agent command. `lifecycle/writer.py` is
the one writer that moves a resource along them; `gpulease states` prints them
(docs/architecture.md).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from gpulease.domain.fleet.erasure import pool_refusal
from gpulease.domain.lifecycle import InvalidTransition, Machine, move
from gpulease.domain.tenant_requests import (  # their own module; named here too
    BACKUP,
    POWER_ACTION,
    SAVED_IMAGE,
    BackupStatus,
    PowerActionStatus,
    PowerKind,
    SavedImageStatus,
)

__all__ = ["BACKUP", "POWER_ACTION", "SAVED_IMAGE", "BackupStatus", "InvalidTransition",
           "PowerActionStatus", "PowerKind", "SavedImageStatus"]


# --- node status ---------------------------------------------------------------------------

class NodeStatus(StrEnum):
    ENROLLING = "enrolling"
    AVAILABLE = "available"
    ALLOCATED = "allocated"
    DEPLOYING = "deploying"
    ACTIVE = "active"
    CLEANING = "cleaning"
    MAINTENANCE = "maintenance"
    FAILED = "failed"
    REPAIR = "repair"
    DELETED = "deleted"


N = NodeStatus
NODE = Machine(
    name="node",
    states={
        N.ENROLLING: "enrolled, but what its BMC reports differs from the offer (or it would "
                     "not power off): an operator checks it, then resumes it",
        N.AVAILABLE: "in the pool: can be ordered (a shared host stays available while it "
                     "hosts containers)",
        N.ALLOCATED: "claimed by an order; the worker starts its deploy",
        N.DEPLOYING: "being deployed for its instance (its stage says which step)",
        N.ACTIVE: "deployed and handed to its tenant",
        N.CLEANING: "handed back or failed: erased from a freshly booted agent ramdisk",
        N.MAINTENANCE: "out of the pool: drained, set aside by an operator, or a step failed "
                       "for good (the reason says which)",
        N.FAILED: "declared broken beyond repair by an operator; kept for the record",
        N.REPAIR: "out for repair after a fault (a ticket may name it): parts replaced, then "
                  "erased and burned in before it returns to the pool; or, for a card "
                  "repair in a window its tenant accepted, still theirs (disks kept) and "
                  "burned in before it returns to them",
        N.DELETED: "removed from the fleet by an operator: its history and certificates kept, "
                   "its name, BMC and serial free to be enrolled again",
    },
    starts=frozenset({N.ENROLLING, N.AVAILABLE}),
    transitions=(
        move("allocate", [N.AVAILABLE], N.ALLOCATED,
             "an order claims it (set-based, in the order's transaction)"),
        move("deploy", [N.ALLOCATED], N.DEPLOYING, "the worker starts the deploy"),
        move("activate", [N.DEPLOYING], N.ACTIVE, "every deploy step done, acceptance passed"),
        move("clean", [N.ALLOCATED, N.DEPLOYING, N.ACTIVE], N.CLEANING,
             "its instance was released or failed: erase before reuse"),
        move("free", [N.CLEANING], N.AVAILABLE, "erased and certified: back in the pool"),
        move("fail", [N.DEPLOYING, N.CLEANING], N.MAINTENANCE,
             "a step failed for good or outlived its deadline: out of the pool, with why"),
        move("drain", [N.AVAILABLE, N.CLEANING], N.MAINTENANCE,
             "an operator's drain takes effect: at once when free, after cleaning when busy"),
        move("request_drain", [N.AVAILABLE, N.ALLOCATED, N.DEPLOYING, N.ACTIVE, N.CLEANING],
             None, "an operator asks for a drain of a node in use: no new claims"),
        move("cancel_drain", [N.AVAILABLE, N.ALLOCATED, N.DEPLOYING, N.ACTIVE, N.CLEANING],
             None, "an operator withdraws a drain that has not taken effect"),
        move("set_aside", [N.ENROLLING, N.AVAILABLE, N.MAINTENANCE, N.FAILED], N.MAINTENANCE,
             "an operator takes a free node out of the pool"),
        move("resume", [N.ENROLLING, N.MAINTENANCE, N.FAILED], N.AVAILABLE,
             "an operator puts it (back) in the pool"),
        move("erase", [N.MAINTENANCE, N.FAILED], N.CLEANING,
             "an operator puts back a node that held a tenant's data with no certified "
             "erase since: erased first, then in the pool"),
        move("retire", [N.MAINTENANCE], N.FAILED,
             "an operator declares it broken beyond repair"),
        move("send_to_repair", [N.AVAILABLE, N.MAINTENANCE, N.FAILED, N.CLEANING], N.REPAIR,
             "an operator sends it for repair (a swapped-out node once its tenant's disks "
             "are erased)"),
        move("repaired", [N.REPAIR], N.CLEANING,
             "an operator records the parts replaced: erased and burned in, then back in "
             "the pool"),
        move("card_out", [N.ACTIVE], N.REPAIR,
             "the repair window its tenant accepted begins: out for a card repair, still "
             "theirs, disks kept"),
        move("return_to_tenant", [N.REPAIR], N.DEPLOYING,
             "a card repair is done: powered on, burned in and accepted before its tenant "
             "has it back"),
        move("burn_in_failed", [N.DEPLOYING, N.CLEANING], N.REPAIR,
             "the burn-in after a repair failed: back to repair, with the report"),
        move("delete", [N.ENROLLING, N.AVAILABLE, N.MAINTENANCE, N.FAILED, N.REPAIR],
             N.DELETED,
             "an operator removes it from the fleet (never while a tenant holds it)"),
    ),
    waits=frozenset({N.ALLOCATED, N.DEPLOYING, N.CLEANING}),
    failures=frozenset({N.MAINTENANCE, N.FAILED, N.REPAIR}),
    finals=frozenset({N.DELETED}),
    entry_checks={N.AVAILABLE: pool_refusal},
)

# Statuses in which a node holds (or is on its way to hold) a tenant's instance.
NODE_BUSY = frozenset({N.ALLOCATED, N.DEPLOYING, N.ACTIVE})
# Statuses the provisioning pipeline drives through stages.
NODE_IN_PIPELINE = frozenset({N.DEPLOYING, N.CLEANING})


# --- node stage: the deploy and clean pipelines ----------------------------------------------

class NodeStage(StrEnum):
    IDLE = "idle"
    POWER_OFF = "power_off"
    ATTACH_MEDIA = "attach_media"
    POWER_ON = "power_on"
    WRITE_IMAGE = "write_image"  # image-based deploys only (IMAGE_DEPLOY_ORDER)
    BOOT_DISK = "boot_disk"
    WAIT_AGENT = "wait_agent"
    VERIFY = "verify"  # the acceptance suite: a failing node never reaches the tenant
    CONFIGURE = "configure"  # after verify: the tenant's keys only on a node that passed
    DETACH_MEDIA = "detach_media"
    CLEAN_SHUTDOWN = "clean_shutdown"
    CLEAN_ATTACH_MEDIA = "clean_attach_media"
    CLEAN_POWER_ON = "clean_power_on"
    CLEAN_WAIT_AGENT = "clean_wait_agent"
    ERASE = "erase"
    BURN_IN = "burn_in"
    CLEAN_POWER_OFF = "clean_power_off"
    RETURN_POWER_ON = "return_power_on"
    RETURN_WAIT_AGENT = "return_wait_agent"
    RETURN_VERIFY = "return_verify"


St = NodeStage
# The acceptance suite runs before anything of the tenant's is on the server: the agent
# puts the SSH keys and the root password in place at configure, once the node passed.
DEPLOY_ORDER: tuple[NodeStage, ...] = (St.POWER_OFF, St.ATTACH_MEDIA, St.POWER_ON,
                                       St.WAIT_AGENT, St.VERIFY, St.CONFIGURE, St.DETACH_MEDIA)
# An image-based deploy (an offer with deploy = "image"): the server boots the deploy
# ramdisk, which checks and writes the image and powers off; then it boots from its disk
# with the config drive, and the agent of the installed system calls in.
IMAGE_DEPLOY_ORDER: tuple[NodeStage, ...] = (St.POWER_OFF, St.ATTACH_MEDIA, St.POWER_ON,
                                             St.WRITE_IMAGE, St.BOOT_DISK, St.WAIT_AGENT,
                                             St.VERIFY, St.CONFIGURE, St.DETACH_MEDIA)
# Erasure always runs from a freshly booted agent ramdisk, never from the tenant's system.
CLEAN_ORDER: tuple[NodeStage, ...] = (St.CLEAN_SHUTDOWN, St.CLEAN_ATTACH_MEDIA,
                                      St.CLEAN_POWER_ON, St.CLEAN_WAIT_AGENT, St.ERASE,
                                      St.BURN_IN, St.CLEAN_POWER_OFF)
# A node back from a card repair for the tenant who holds it: their system boots as it was
# (nothing reinstalled, nothing erased) and the acceptance suite, burn-in included, runs
# before they have it back.
RETURN_ORDER: tuple[NodeStage, ...] = (St.RETURN_POWER_ON, St.RETURN_WAIT_AGENT,
                                       St.RETURN_VERIFY)
# The stages whose acceptance run judges a repair: a failure sends the node back to repair.
BURN_IN_STAGES = frozenset({St.BURN_IN, *RETURN_ORDER})


def _pipeline(order: tuple[NodeStage, ...]) -> list[tuple[NodeStage, NodeStage]]:
    return list(zip(order, order[1:], strict=False))


NODE_STAGE = Machine(
    name="node stage",
    states={
        St.IDLE: "no step under way (stored as NULL)",
        St.POWER_OFF: "deploy: power the server off (requested once, then polled)",
        St.ATTACH_MEDIA: "deploy: the image and config drive as virtual media, or a network "
                         "boot (UEFI HTTP, PXE) chained to the control plane",
        St.POWER_ON: "deploy: power on into the installer (or the deploy ramdisk)",
        St.WRITE_IMAGE: "image deploy: the deploy ramdisk checks the image's SHA-256, writes "
                        "it onto the system disk, reads it back and reports",
        St.BOOT_DISK: "image deploy: the ramdisk is off; the config drive goes in, the "
                      "server boots from its disk",
        St.WAIT_AGENT: "deploy: wait for the node agent to call in from the new system",
        St.VERIFY: "deploy: the acceptance suite, before anything of the tenant's is on the "
                   "server; a failing node never reaches the tenant",
        St.CONFIGURE: "deploy: the node passed: the agent puts the tenant's SSH keys and root "
                      "password in place and reports the address (not safe to repeat: an "
                      "interrupted one is not repeated there; the server is cleaned and the "
                      "order goes on on a spare, or fails when none is free)",
        St.DETACH_MEDIA: "deploy: eject the media; the node becomes active",
        St.CLEAN_SHUTDOWN: "clean: power the server off",
        St.CLEAN_ATTACH_MEDIA: "clean: boot the agent ramdisk (with its one-time token when "
                               "the real agent runs)",
        St.CLEAN_POWER_ON: "clean: power on into the ramdisk",
        St.CLEAN_WAIT_AGENT: "clean: wait for the ramdisk's agent",
        St.ERASE: "clean: erase every tenant-writable disk, one certificate per disk",
        St.BURN_IN: "clean: after a repair only, the acceptance suite (burn-in included) "
                    "from the ramdisk; a failure sends the node back to repair",
        St.CLEAN_POWER_OFF: "clean: eject the media and power off; the node is free",
        St.RETURN_POWER_ON: "card repair done: power on into the tenant's own system",
        St.RETURN_WAIT_AGENT: "card repair done: wait for the node agent to call in",
        St.RETURN_VERIFY: "card repair done: the acceptance suite, burn-in included; a "
                          "failure sends the node back to repair",
    },
    starts=frozenset({St.IDLE}),
    idle=St.IDLE,
    transitions=(
        move("deploy", [St.IDLE], St.POWER_OFF, "the node's deploy begins"),
        move("return", [St.IDLE], St.RETURN_POWER_ON,
             "a card repair is done: the node's return to its tenant begins"),
        *(move("advance", [a], b, "the step is done: the next one")
          for a, b in _pipeline(DEPLOY_ORDER) + _pipeline(CLEAN_ORDER)
          + _pipeline(RETURN_ORDER) + _pipeline(IMAGE_DEPLOY_ORDER[3:6])),
        move("image", [St.POWER_ON], St.WRITE_IMAGE,
             "an image deploy's ramdisk is up: it writes the image"),
        move("done", [St.DETACH_MEDIA, St.CLEAN_POWER_OFF, St.RETURN_VERIFY], St.IDLE,
             "the last step is done: the node is active, or free"),
        move("clean", [St.IDLE, *IMAGE_DEPLOY_ORDER, *RETURN_ORDER], St.CLEAN_SHUTDOWN,
             "cleaning begins, from wherever the node was"),
        move("abort", [s for s in St if s != St.IDLE], St.IDLE,
             "a step failed for good: the node leaves the pipeline"),
    ),
    waits=frozenset({St.POWER_OFF, St.POWER_ON, St.WRITE_IMAGE, St.BOOT_DISK, St.WAIT_AGENT,
                     St.CONFIGURE, St.VERIFY, St.CLEAN_SHUTDOWN, St.CLEAN_POWER_ON,
                     St.CLEAN_WAIT_AGENT, St.ERASE, St.BURN_IN, St.CLEAN_POWER_OFF,
                     *RETURN_ORDER}),
)

# CONFIGURE writes the tenant's credentials through the agent; a
# worker that died in the middle of it leaves the machine half-configured, so the step is
# not re-run blindly: the deploy fails with a reason and the node is cleaned. Every other
# step (power, media, polling, erase) is idempotent and is simply run again.
UNSAFE_TO_REPEAT: frozenset[str] = frozenset({St.CONFIGURE.value})


# --- instance status and stage -------------------------------------------------------------

class InstanceStatus(StrEnum):
    PENDING = "pending"
    DEPLOYING = "deploying"
    READY = "ready"
    RELEASING = "releasing"
    RELEASED = "released"
    FAILED = "failed"


IS = InstanceStatus
INSTANCE = Machine(
    name="instance",
    states={
        IS.PENDING: "ordered: nodes or GPUs claimed, the first period held; the worker "
                    "picks it up",
        IS.DEPLOYING: "its nodes are being deployed",
        IS.READY: "delivered: the tenant has it; its lease or hourly meter runs",
        IS.RELEASING: "handed back (by the tenant, at the end of grace, or unpaid): its "
                      "nodes are erased, its container removed",
        IS.RELEASED: "over: nothing is held any more",
        IS.FAILED: "delivery failed (the reason says why); its nodes are erased before reuse",
    },
    starts=frozenset({IS.PENDING}),
    transitions=(
        move("deploy", [IS.PENDING], IS.DEPLOYING, "the worker starts its nodes' deploys"),
        move("deliver", [IS.PENDING, IS.DEPLOYING], IS.READY,
             "every node active (or the container running)"),
        move("fail", [IS.PENDING, IS.DEPLOYING], IS.FAILED,
             "a node failed and no spare could take its place, or the container would "
             "not start"),
        move("release", [IS.PENDING, IS.DEPLOYING, IS.READY, IS.FAILED], IS.RELEASING,
             "the tenant releases it, its grace ends, or its balance cannot pay"),
        move("finish", [IS.RELEASING], IS.RELEASED, "its nodes are free, its GPUs released"),
    ),
    waits=frozenset({IS.PENDING, IS.DEPLOYING, IS.RELEASING}),
    failures=frozenset({IS.FAILED}),
    finals=frozenset({IS.RELEASED}),
)

INSTANCE_LIVE = frozenset({IS.PENDING, IS.DEPLOYING, IS.READY, IS.RELEASING})


class InstanceStage(StrEnum):
    ORDERED = "ordered"
    DEPLOYING = "deploying"
    READY = "ready"
    REPLACING = "replacing"
    IN_REPAIR = "in_repair"
    CLEANING = "cleaning"
    RELEASED = "released"
    FAILED = "failed"


ISt = InstanceStage
INSTANCE_STAGE = Machine(
    name="instance stage",
    states={
        ISt.ORDERED: "placed; waiting for the worker",
        ISt.DEPLOYING: "its nodes deploy (shown as the slowest node's step)",
        ISt.READY: "delivered: the tenant has it",
        ISt.REPLACING: "delivered, and a faulty node is being replaced by a spare of the "
                       "same offer (deployed and accepted as at delivery)",
        ISt.IN_REPAIR: "delivered, and a node is out for a card repair in the window its "
                       "tenant accepted; it comes back burned in and accepted",
        ISt.CLEANING: "handed back: its nodes are being erased",
        ISt.RELEASED: "handed back and nothing held any more",
        ISt.FAILED: "delivery failed (the status reason says why)",
    },
    starts=frozenset({ISt.ORDERED}),
    transitions=(
        move("deploy", [ISt.ORDERED], ISt.DEPLOYING, "its nodes' deploys begin"),
        move("deliver", [ISt.ORDERED, ISt.DEPLOYING], ISt.READY, "delivered"),
        move("fail", [ISt.ORDERED, ISt.DEPLOYING], ISt.FAILED, "delivery failed"),
        move("replace", [ISt.READY], ISt.REPLACING,
             "an operator swaps a faulty node for a spare (a ticket says why)"),
        move("card_repair", [ISt.READY], ISt.IN_REPAIR,
             "the repair window its tenant accepted begins (a ticket says why)"),
        move("settle", [ISt.REPLACING, ISt.IN_REPAIR], ISt.READY,
             "the spare is delivered, or the repaired node is back and accepted (or the "
             "replacement given up, the reason says why)"),
        move("clean", [ISt.ORDERED, ISt.DEPLOYING, ISt.READY, ISt.REPLACING, ISt.IN_REPAIR,
                       ISt.FAILED],
             ISt.CLEANING, "released with nodes to erase"),
        move("finish", [ISt.ORDERED, ISt.DEPLOYING, ISt.READY, ISt.REPLACING, ISt.IN_REPAIR,
                        ISt.CLEANING, ISt.FAILED], ISt.RELEASED, "nothing held any more"),
    ),
    waits=frozenset({ISt.ORDERED, ISt.DEPLOYING, ISt.REPLACING, ISt.IN_REPAIR,
                     ISt.CLEANING}),
    failures=frozenset({ISt.FAILED}),
    finals=frozenset({ISt.RELEASED}),
)


# --- lease ---------------------------------------------------------------------------------

class LeaseStatus(StrEnum):
    ACTIVE = "active"
    GRACE = "grace"
    ENDED = "ended"


L = LeaseStatus
LEASE = Machine(
    name="lease",
    states={
        L.ACTIVE: "the term runs, from delivery to its end; reminders 7, 3 and 1 days before",
        L.GRACE: "the term ended unrenewed: the machine stays (flagged) until grace ends; "
                 "renewing cancels the erase",
        L.ENDED: "over: released by the tenant, or grace ran out and the disks are erased",
    },
    starts=frozenset({L.ACTIVE}),
    transitions=(
        move("renew", [L.ACTIVE, L.GRACE], L.ACTIVE,
             "the tenant (or auto-renew) pays more periods"),
        move("expire", [L.ACTIVE], L.GRACE, "the term ended without a renewal"),
        move("end", [L.ACTIVE, L.GRACE], L.ENDED,
             "the instance is released, or grace ran out"),
    ),
    waits=frozenset({L.GRACE}),
    finals=frozenset({L.ENDED}),
)


# --- invoice -------------------------------------------------------------------------------

class InvoiceStatus(StrEnum):
    DRAFT = "draft"
    FINAL = "final"


INVOICE = Machine(
    name="invoice",
    states={
        InvoiceStatus.DRAFT: "recomputed from the ledger at every run until it is final",
        InvoiceStatus.FINAL: "numbered and sealed with a digest: never changes; corrected by "
                             "credit notes",
    },
    starts=frozenset({InvoiceStatus.DRAFT}),
    transitions=(
        move("finalize", [InvoiceStatus.DRAFT], InvoiceStatus.FINAL,
             "the month's run (or an operator) numbers and seals it"),
    ),
    finals=frozenset({InvoiceStatus.FINAL}),
)


# --- tenant ---------------------------------------------------------------------------------

class TenantStatus(StrEnum):
    ACTIVE = "active"
    SUSPENDED = "suspended"
    CLOSED = "closed"


TS = TenantStatus
TENANT = Machine(
    name="tenant",
    states={
        TS.ACTIVE: "may order, renew and use what it rents",
        TS.SUSPENDED: "suspended by an operator (the reason says why): new orders refused, "
                      "its machines kept and billed as before",
        TS.CLOSED: "closed after its last release, final invoice and payout: its users "
                   "disabled and tokens ended; its records kept",
    },
    starts=frozenset({TS.ACTIVE}),
    transitions=(
        move("suspend", [TS.ACTIVE], TS.SUSPENDED, "an operator suspends the account"),
        move("reinstate", [TS.SUSPENDED], TS.ACTIVE, "an operator lifts the suspension"),
        move("close", [TS.ACTIVE, TS.SUSPENDED], TS.CLOSED,
             "an operator closes the account once nothing is rented, invoiced or owed"),
    ),
    failures=frozenset({TS.SUSPENDED}),
    finals=frozenset({TS.CLOSED}),
)


# --- the deploy circuit breaker -------------------------------------------------------------

class BreakerStatus(StrEnum):
    CLOSED = "closed"
    OPEN = "open"


BREAKER = Machine(
    name="deploy breaker",
    states={
        BreakerStatus.CLOSED: "deploys run; a node whose deploy fails for good goes to "
                              "maintenance",
        BreakerStatus.OPEN: "the latest deploys all failed the same way (the reason says "
                            "how): a failing deploy is held and retried, its node stays out "
                            "of maintenance, operators are alerted",
    },
    starts=frozenset({BreakerStatus.CLOSED}),
    transitions=(
        move("trip", [BreakerStatus.CLOSED], BreakerStatus.OPEN,
             "the latest GPULEASE_BREAKER_FAILURES deploys failed the same way"),
        move("close", [BreakerStatus.OPEN], BreakerStatus.CLOSED,
             "a deploy succeeded: the cause is gone; held deploys retry at once"),
        move("reset", [BreakerStatus.OPEN], BreakerStatus.CLOSED,
             "an operator closes it; held deploys retry at once"),
    ),
    failures=frozenset({BreakerStatus.OPEN}),
)


# --- ticket ---------------------------------------------------------------------------------

class TicketStatus(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    MITIGATED = "mitigated"
    RESOLVED = "resolved"


TK = TicketStatus
TICKET = Machine(
    name="ticket",
    states={
        TK.OPEN: "opened from a fault's evidence or by a tenant: waiting for its first response",
        TK.ACKNOWLEDGED: "an operator has responded and works on it",
        TK.MITIGATED: "the tenant is served again (moved to a spare, the node fixed, a "
                      "workaround); a repair may go on",
        TK.RESOLVED: "done, with what was found and done",
    },
    starts=frozenset({TK.OPEN}),
    transitions=(
        move("acknowledge", [TK.OPEN], TK.ACKNOWLEDGED,
             "an operator's first response (an acknowledgement or a reply)"),
        move("mitigate", [TK.OPEN, TK.ACKNOWLEDGED], TK.MITIGATED,
             "the tenant is served again"),
        move("resolve", [TK.OPEN, TK.ACKNOWLEDGED, TK.MITIGATED], TK.RESOLVED,
             "an operator resolves it (or the tenant withdraws their own)"),
    ),
    waits=frozenset({TK.OPEN}),
    finals=frozenset({TK.RESOLVED}),
)


# --- usage record --------------------------------------------------------------------------

class UsageStatus(StrEnum):
    CHARGED = "charged"
    HELD = "held"
    REJECTED = "rejected"


U = UsageStatus
USAGE = Machine(
    name="usage record",
    states={
        U.CHARGED: "rated and posted to the wallet (the worker's GPU-hours, or a report "
                   "within what the instance could use)",
        U.HELD: "reported beyond what the instance could physically use (uplink, disk or "
                "GPUs × time): kept, not charged, waiting for an operator",
        U.REJECTED: "an operator found the held report wrong: never charged",
    },
    starts=frozenset({U.CHARGED, U.HELD}),
    transitions=(
        move("charge", [U.HELD], U.CHARGED, "an operator confirms the held usage was real"),
        move("reject", [U.HELD], U.REJECTED, "an operator refuses the held usage"),
    ),
    waits=frozenset({U.HELD}),
    finals=frozenset({U.CHARGED, U.REJECTED}),
)


# --- agent command -------------------------------------------------------------------------

class CommandStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


C = CommandStatus
AGENT_COMMAND = Machine(
    name="agent command",
    states={
        C.PENDING: "filed by a worker step (or an on-demand verify); the node's agent has "
                   "not fetched it yet",
        C.RUNNING: "fetched by the agent over its own connection: being carried out",
        C.DONE: "the agent posted its result; the waiting step takes it",
        C.FAILED: "the agent reported failure (the error says why)",
    },
    starts=frozenset({C.PENDING}),
    transitions=(
        move("fetch", [C.PENDING], C.RUNNING, "the agent fetches its pending work"),
        move("succeed", [C.PENDING, C.RUNNING], C.DONE, "the agent posts a result"),
        move("fail", [C.PENDING, C.RUNNING], C.FAILED, "the agent posts a failure"),
    ),
    waits=frozenset({C.PENDING, C.RUNNING}),
    failures=frozenset({C.FAILED}),
    finals=frozenset({C.DONE, C.FAILED}),
)


MACHINES: tuple[Machine[Any], ...] = (
    NODE, NODE_STAGE, INSTANCE, INSTANCE_STAGE, LEASE, INVOICE, USAGE, AGENT_COMMAND, TENANT,
    BREAKER, TICKET, BACKUP, SAVED_IMAGE, POWER_ACTION)

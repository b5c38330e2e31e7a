"""Lifecycles of what a tenant asks done to its delivered instance, apart from the instance's
own: a backup (or restore) of a rented server's data disk, a container saved as an image,
and a power action (reboot, power cycle, restart). `domain/states.py` lists them with
every other lifecycle."""

from __future__ import annotations

from enum import StrEnum

from gpulease.domain.lifecycle import Machine, move

# --- backup (and restore) of a rented server's data disk ------------------------------------

class BackupStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


B = BackupStatus
BACKUP = Machine(
    name="backup",
    states={
        B.QUEUED: "asked for (by the tenant, or again after a transient failure): the worker "
                  "mints a key for the run and sends the work to the node's agent",
        B.RUNNING: "the node's agent moves the bytes between the data disk and the tenant's "
                   "bucket (a backup, or a restore)",
        B.SUCCEEDED: "done: the snapshot (or the restored files) with its figures; the run's "
                     "key deleted",
        B.FAILED: "failed for good (the reason says why), after its retries; the tenant is "
                  "told",
    },
    starts=frozenset({B.QUEUED}),
    transitions=(
        move("start", [B.QUEUED], B.RUNNING, "the worker sends it to the node's agent"),
        move("succeed", [B.RUNNING], B.SUCCEEDED, "the agent reports it done"),
        move("retry", [B.RUNNING], B.QUEUED, "a transient failure: again after a pause"),
        move("fail", [B.QUEUED, B.RUNNING], B.FAILED,
             "the agent failed for good, the retries ran out, or the machine is gone"),
    ),
    waits=frozenset({B.QUEUED, B.RUNNING}),
    failures=frozenset({B.FAILED}),
    finals=frozenset({B.SUCCEEDED, B.FAILED}),
)


# --- a container instance saved as an image (a tenant's environment) -----------------------

class SavedImageStatus(StrEnum):
    SAVING = "saving"
    READY = "ready"
    FAILED = "failed"
    DELETED = "deleted"


SI = SavedImageStatus
SAVED_IMAGE = Machine(
    name="saved_image",
    states={
        SI.SAVING: "asked for: the worker commits the container on its host's engine and "
                   "pushes the image to the platform's registry",
        SI.READY: "in the registry: its tenant may order containers from it",
        SI.FAILED: "could not be saved (the reason says why)",
        SI.DELETED: "deleted by its tenant: gone from the registry, no longer ordered",
    },
    starts=frozenset({SI.SAVING}),
    transitions=(
        move("save", [SI.SAVING], SI.READY, "committed and pushed"),
        move("fail", [SI.SAVING], SI.FAILED,
             "the container is gone, or the engine or the registry refused"),
        move("delete", [SI.READY, SI.FAILED], SI.DELETED, "its tenant deleted it"),
    ),
    waits=frozenset({SI.SAVING}),
    failures=frozenset({SI.FAILED}),
    finals=frozenset({SI.DELETED}),
)


# --- a tenant's power action on its own instance (reboot, power cycle, restart) -----------

class PowerActionStatus(StrEnum):
    QUEUED = "queued"
    DONE = "done"
    FAILED = "failed"


class PowerKind(StrEnum):
    REBOOT = "reboot"  # bare metal: the BMC asks the OS to restart (GracefulRestart)
    POWER_CYCLE = "power_cycle"  # bare metal: the BMC resets the server (ForceRestart)
    RESTART = "restart"  # a container: its engine restarts it (its data volume stays)


PA = PowerActionStatus
POWER_ACTION = Machine(
    name="power_action",
    states={
        PA.QUEUED: "asked for by the tenant: the worker of the instance's site sends it to "
                   "each server's BMC, or to the container's engine",
        PA.DONE: "every BMC (or the engine) accepted it",
        PA.FAILED: "a BMC or the engine refused, or the instance stopped being ready (the "
                   "reason says why)",
    },
    starts=frozenset({PA.QUEUED}),
    transitions=(
        move("done", [PA.QUEUED], PA.DONE, "sent, and accepted"),
        move("fail", [PA.QUEUED], PA.FAILED, "refused, or nothing left to act on"),
    ),
    waits=frozenset({PA.QUEUED}),
    failures=frozenset({PA.FAILED}),
    finals=frozenset({PA.DONE}),
)

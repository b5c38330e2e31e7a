"""What a tenant does to its instance: hand it back (its nodes erased, then free again), and
read its root password, once."""

from __future__ import annotations

from gpulease.db.repositories import get_instance
from gpulease.domain.accounts import Principal
from gpulease.domain.errors import Conflict, Gone
from gpulease.domain.phrases import phrase
from gpulease.domain.states import INSTANCE, InstanceStatus
from gpulease.lifecycle.history import by
from gpulease.lifecycle.writer import Move, transition
from gpulease.ports.records import Driven, Sealed
from gpulease.schemas import CredentialsView, InstanceView
from gpulease.services.instances.views import instance_view, ssh_command


def release_instance(p: Driven, actor: Principal, instance_id: str) -> InstanceView:
    """Hand an instance back: its nodes are erased, then free again. Repeating is harmless."""
    actor.require_order_rights()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        if inst.status not in (InstanceStatus.RELEASING.value, InstanceStatus.RELEASED.value):
            # Its effects: unused whole periods back by the policy, the worker takes over.
            transition(s, p, inst, INSTANCE, "release", Move(p.clock.now(), actor=by(actor),
                                                             reason=phrase("released by tenant")))
        view = instance_view(s, p, inst)
    p.wake()
    return view


def reveal_credentials(p: Sealed, actor: Principal, instance_id: str) -> CredentialsView:
    actor.require_order_rights()
    with p.db.write() as s:
        inst = get_instance(s, actor, instance_id, lock=True)
        if inst.status != InstanceStatus.READY.value:
            raise Conflict(
                "Instance {instance} is {status}; credentials are shown once it is ready.",
                instance=inst.id, status=inst.status)
        if inst.credentials_revealed_at is not None or inst.root_password_enc is None:
            raise Gone(
                "The root password of {instance} was already shown "
                "({inst_credentials_revealed_at:%Y-%m-%d %H:%M} UTC). Log in with your SSH key "
                "and run `passwd` to set a new one.",
                instance=inst.id, inst_credentials_revealed_at=inst.credentials_revealed_at)
        password = p.box.open(inst.root_password_enc)
        inst.credentials_revealed_at = p.clock.now()
        inst.root_password_enc = None  # shown once: not kept after that
        view = CredentialsView(
            instance_id=inst.id, root_password=password, ip_address=inst.ip_address,
            ssh_command=ssh_command(inst),
        )
        if inst.kind == "container" and not inst.password_login:
            view.note += (" SSH takes your keys only on this instance (order with "
                          "ssh_password to log in with the password).")
        return view

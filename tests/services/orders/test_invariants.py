"""Hypothesis drives random orders (by a funded tenant and a short one), top-ups (some
with a repeated reference), releases, drains, resumes and worker steps (with injected BMC
faults) and checks after every step that the fleet and the money stay consistent: no GPU
held twice, nodes and instances agree, stock matches inventory, each ledger sums to its
balance, and only undelivered orders hold money. Both databases."""

from __future__ import annotations

import uuid
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from sqlalchemy import func, select

from gpulease.db.money_tables import LedgerEntry
from gpulease.db.tables import GpuAllocation, Instance, Node
from gpulease.demo import seed_demo_fleet
from gpulease.domain.errors import Conflict, OutOfStock, PaymentRequired
from gpulease.domain.states import INSTANCE_LIVE, NODE_BUSY
from gpulease.schemas import OrderRequest
from gpulease.services.catalog import offers as catalog
from gpulease.services.fleet import inventory
from gpulease.services.instances import actions
from gpulease.services.money import wallet
from gpulease.services.money.wallet import ledger_sums_to_balance
from gpulease.services.orders import ordering as orders
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.testing.factories import double_allocated_gpus
from gpulease.testing.platforms import drop_schema, machine_platform
from gpulease.worker.runner import Worker

KEY = ssh_key()
H100 = {"sku": "h100-80g-x8", "region": "ningxia-1"}
ORDERS = st.sampled_from([
    {"kind": "bare_metal", **H100},
    {"kind": "bare_metal", "sku": "rtx4090-24g-x8", "region": "sichuan-2"},
    {"kind": "cluster", "nodes": 2, **H100},
    {"kind": "container", "offer": "rtx4090-24g-container", "gpus": 3},
    {"kind": "container", "offer": "rtx4090-24g-container", "gpus": 6},
])


class FleetMachine(RuleBasedStateMachine):
    db = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.p, self.schema = machine_platform(self.db, max_attempts=2)
        self.p.db.migrate()
        seed_demo_fleet(self.p, 2)
        self.tenant = new_tenant(self.p)
        from gpulease.services.accounts import identity as accounts
        from gpulease.testing.callers import TenantCtx

        _, tok = accounts.create_operator(self.p, f"op{uuid.uuid4().hex[:6]}@e.io", "Op")
        self.op = TenantCtx(accounts.authenticate(self.p, tok.token), tok.token, "")
        self.worker = Worker(self.p, owner="hypothesis")
        self.ids: list[str] = []
        created = accounts.create_tenant(self.p, f"short-{uuid.uuid4().hex[:6]}",
                                         accounts.Person(f"s{uuid.uuid4().hex[:6]}@e.io", "Short"))
        self.short = TenantCtx(accounts.authenticate(self.p, created.token.token),
                               created.token.token, created.tenant.id)
        self.short_ids: list[str] = []

    def teardown(self) -> None:
        drop_schema(self.p, self.schema)

    @rule(spec=ORDERS, short=st.booleans())
    def order(self, spec: dict, short: bool) -> None:
        who = self.short if short else self.tenant
        try:
            view, _ = orders.place_order(self.p, who.principal,
                                         OrderRequest(ssh_keys=[KEY], **spec))
            (self.short_ids if short else self.ids).append(view.id)
        except (OutOfStock, PaymentRequired):
            pass

    @rule(amount=st.integers(1, 120_000), ref=st.sampled_from(["a", "b", "c", "d", "e"]))
    def top_up(self, amount: int, ref: str) -> None:
        before = wallet.show_wallet(self.p, self.short.principal).balance
        try:
            after = wallet.top_up(self.p, self.op.principal, self.short.tenant_id,
                                  Decimal(amount), f"wire-{ref}").balance
        except Conflict:  # the reference was used already: nothing added
            after = before
        assert wallet.show_wallet(self.p, self.short.principal).balance == after

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self.ids:
            iid = data.draw(st.sampled_from(self.ids))
            actions.release_instance(self.p, self.tenant.principal, iid)

    @rule(steps=st.integers(1, 6))
    def work(self, steps: int) -> None:
        for _ in range(steps):
            self.worker.step()

    @rule()
    def settle(self) -> None:
        self.worker.run_until_idle(timeout_s=30)

    @rule(data=st.data(), op=st.sampled_from(["power_on", "insert_media", "agent_erase"]),
          kind=st.sampled_from(["transient", "permanent"]))
    def fault(self, data: st.DataObject, op: str, kind: str) -> None:
        with self.p.db.read() as s:
            names = list(s.scalars(select(Node.name)))
        self.p.drivers.fleet.inject_fault(  # type: ignore[union-attr]
            data.draw(st.sampled_from(names)), op, kind)

    @rule(data=st.data(), action=st.sampled_from(["drain", "maintenance", "resume"]))
    def operator_action(self, data: st.DataObject, action: str) -> None:
        with self.p.db.read() as s:
            names = list(s.scalars(select(Node.name).where(Node.sku == "h100-80g-x8")))
        name = data.draw(st.sampled_from(names))
        fn = {"drain": inventory.drain_node, "maintenance": inventory.maintenance_node}.get(action)
        try:
            if fn:
                fn(self.p, self.op.principal, name, "hypothesis")
            else:
                inventory.resume_node(self.p, self.op.principal, name)
        except Conflict:
            pass

    @invariant()
    def ledgers_sum_to_balances(self) -> None:
        with self.p.db.read() as s:
            for t in (self.tenant, self.short):
                assert ledger_sums_to_balance(s, t.tenant_id), t.tenant_id

    @invariant()
    def only_undelivered_orders_hold_money(self) -> None:
        with self.p.db.read() as s:
            held = s.execute(select(LedgerEntry.instance_id, func.sum(LedgerEntry.amount))
                             .where(LedgerEntry.kind.in_(("hold", "hold_release")))
                             .group_by(LedgerEntry.instance_id)).all()
            for iid, total in held:
                inst = s.get(Instance, iid)
                assert inst is not None
                if Decimal(str(total)) != 0:
                    assert inst.ready_at is None and inst.status in (
                        "pending", "deploying", "releasing"), (iid, inst.status, total)

    @invariant()
    def no_gpu_held_twice(self) -> None:
        assert double_allocated_gpus(self.p) == []

    @invariant()
    def nodes_and_instances_agree(self) -> None:
        with self.p.db.read() as s:
            for node in s.scalars(select(Node)):
                if node.status in NODE_BUSY:
                    assert node.instance_id is not None, node.name
                if node.instance_id is not None:
                    inst = s.get(Instance, node.instance_id)
                    assert inst is not None
                    # a bound node belongs to a live or failed-and-cleaning instance
                    assert inst.status in INSTANCE_LIVE or inst.status == "failed" and (
                        node.status == "cleaning"), (node.name, node.status, inst.status)
                held = s.scalar(select(func.count()).select_from(GpuAllocation).where(
                    GpuAllocation.node_id == node.id, GpuAllocation.released_at.is_(None)))
                if node.pool == "bare_metal":
                    assert held in (0, 8), (node.name, held)
                    assert (held == 8) == (node.instance_id is not None), (node.name, held)
            for inst in s.scalars(select(Instance).where(Instance.status == "released")):
                active = s.scalar(select(func.count()).select_from(GpuAllocation).where(
                    GpuAllocation.instance_id == inst.id, GpuAllocation.released_at.is_(None)))
                assert active == 0, inst.id

    @invariant()
    def stock_matches_inventory(self) -> None:
        view = catalog.catalog_view(self.p)
        with self.p.db.read() as s:
            free = s.scalar(select(func.count()).select_from(Node).where(
                Node.sku == "h100-80g-x8", Node.status == "available",
                Node.drain_requested_at.is_(None), Node.pool == "bare_metal"))
        assert next(o.stock for o in view.offers if o.sku == "h100-80g-x8") == free


RUN = settings(max_examples=8, stateful_step_count=25, deadline=None,
               suppress_health_check=list(HealthCheck))


class PostgresFleetMachine(FleetMachine):
    db = "postgresql"


TestFleetSQLite = FleetMachine.TestCase
TestFleetSQLite.settings = RUN
TestFleetPostgres = PostgresFleetMachine.TestCase
TestFleetPostgres.settings = settings(RUN, max_examples=5)  # each example costs more there

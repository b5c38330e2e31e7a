"""The demo: a fleet of simulated servers and ready-made operator and tenant tokens."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from sqlalchemy import func, select

from gpulease.db.tables import Node
from gpulease.domain.errors import Unauthorized
from gpulease.lab.lab import Lab, enroll_request, fabric_id
from gpulease.platform import Platform
from gpulease.services.accounts import identity as accounts
from gpulease.services.accounts import users
from gpulease.services.fleet.inventory import NodeSpec, add_node, ensure_fabric, ensure_rack

OPERATOR_TOKEN_FILE = "operator.token"
TENANT_TOKEN_FILE = "demo-tenant.token"


def demo_node_names(p: Platform, nodes_per_offer: int) -> list[tuple[str, str, str, str]]:
    """(name, sku, region, pool) of every demo node, in a fixed order."""
    out = [(f"sim-{o.sku}-{o.region}-{i:02d}", o.sku, o.region, "bare_metal")
           for o in p.catalog.offers for i in range(1, nodes_per_offer + 1)
           if o.deploy != "image"]  # no stand-in writes an image: real servers (the lab) do
    out += [(f"sim-{c.host_sku}-{c.region}-shared-{i:02d}", c.host_sku, c.region, "container")
            for c in p.catalog.container_offers for i in range(1, nodes_per_offer + 1)]
    return out


def seed_demo_fleet(p: Platform, nodes_per_offer: int,
                    redfish: tuple[list[str], str, str] | None = None) -> int:
    """Add `nodes_per_offer` simulated nodes per offer (and per container offer), each
    region on one InfiniBand fabric. With `redfish` = (system URLs, user, password) the
    nodes sit behind those Redfish systems (an emulator) instead of the simulated BMC.
    Does nothing when the fleet already has nodes."""
    with p.db.write() as s:
        if s.scalar(select(func.count()).select_from(Node)):
            return 0
        added = 0
        regions = {o.region for o in p.catalog.offers} | {
            c.region for c in p.catalog.container_offers}
        for region in sorted(regions):
            fabric = f"ib-{region}-1"
            ensure_fabric(s, fabric, region)
            ensure_rack(s, f"{region}-r01", region, f"{region}-a", fabric, f"leaf-{region}-01")
        s.flush()
        for n, (name, sku, region, pool) in enumerate(demo_node_names(p, nodes_per_offer)):
            bmc = {"bmc_password": "simulated", "serial": f"SIM-{name}"}
            if redfish is not None:
                urls, user, password = redfish
                bmc = {"bmc_driver": "redfish", "bmc_address": urls[n], "bmc_username": user,
                       "bmc_password": password, "serial": f"SIM-{name}"}
            add_node(s, p, NodeSpec(name=name, sku=sku, region=region, pool=pool,
                                    rack_id=f"{region}-r01", fabric_id=f"ib-{region}-1",
                                    **bmc))  # type: ignore[arg-type]
            added += 1
        return added


def _valid(p: Platform, path: Path) -> bool:
    if not path.exists():
        return False
    try:
        accounts.authenticate(p, path.read_text().strip())
        return True
    except Unauthorized:
        return False


def ensure_demo_tokens(p: Platform, data_dir: Path) -> tuple[Path, Path]:
    """Write an operator token and a demo tenant admin's token, unless valid ones exist."""
    op_path, tenant_path = data_dir / OPERATOR_TOKEN_FILE, data_dir / TENANT_TOKEN_FILE
    if not _valid(p, op_path):
        n = _count_users(p)
        _, token = accounts.create_operator(p, f"operator{n}@gpulease.local", "Operator")
        _write_secret(op_path, token.secret())
    if not _valid(p, tenant_path):
        n = _count_users(p)
        created = accounts.create_tenant(
            p, f"demo-{n}", accounts.Person(f"demo{n}@gpulease.local", "Demo tenant admin"),
            token_days=None)
        fund_demo_tenant(p, created.tenant.id)
        _write_secret(tenant_path, created.token.secret())
    return op_path, tenant_path


CONSOLE_LOGIN_FILE = "demo-console-login.txt"
OPERATOR_LOGIN_FILE = "demo-operator-login.txt"


def ensure_demo_console_login(p: Platform, data_dir: Path, token: Path,
                              file: str = CONSOLE_LOGIN_FILE) -> Path:
    """A console password for the user of `token` (the demo tenant's admin, or the
    operator with OPERATOR_LOGIN_FILE), written with the e-mail to a file (0600) beside
    the tokens; kept across restarts."""
    import secrets

    from gpulease.db.tables import User

    path = data_dir / file
    if path.exists() and path.stat().st_mtime >= token.stat().st_mtime:
        return path  # written for the current token's user
    who = accounts.authenticate(p, token.read_text().strip())
    password = secrets.token_urlsafe(12)
    users.set_password(p, who.user_id, password)
    with p.db.read() as s:
        email = s.scalar(select(User.email).where(User.id == who.user_id))
    _write_secret(path, f"{email}\n{password}")
    return path


def _count_users(p: Platform) -> int:
    from gpulease.db.tables import User

    with p.db.read() as s:
        return s.scalar(select(func.count()).select_from(User)) or 0


def _write_secret(path: Path, value: str) -> None:
    path.write_text(value + "\n")
    path.chmod(0o600)


DEMO_FUNDS = Decimal("2000000.00")


def fund_demo_tenant(p: Platform, tenant_id: str) -> None:
    """The demo account is funded (¥2,000,000), as by an operator's top-up."""
    from gpulease.domain.accounts import Principal, Role
    from gpulease.services.money import wallet

    system = Principal(user_id="demo-setup", tenant_id=None, role=Role.OPERATOR)
    wallet.top_up(p, system, tenant_id, DEMO_FUNDS, "demo account funding")


def enroll_lab(p: Platform, lab: Lab) -> list[str]:
    """The lab's servers enrolled through their Redfish BMC, as any server is (each once):
    `name: status` of those enrolled now."""
    from gpulease.domain.accounts import Principal, Role
    from gpulease.services.fleet import enrollment

    system = Principal(user_id="lab-setup", tenant_id=None, role=Role.OPERATOR)
    fabric = fabric_id(lab)
    with p.db.write() as s:
        known = set(s.scalars(select(Node.name)))
        if fabric is not None:  # an isolated Ethernet network, in the platform as a fabric
            ensure_fabric(s, fabric, "lab", kind="ethernet", rate_gbps=1)
    enrolled = []
    for server in lab.servers:
        if server["name"] in known:
            continue
        node = enrollment.enroll(p, system, enroll_request(lab, server))
        enrolled.append(f"{node.name}: {node.status}"
                        + (f" ({node.status_reason})" if node.status_reason else ""))
    return enrolled

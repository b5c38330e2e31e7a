"""After a stage fails (a deploy or a clean that ends in maintenance), the server is left
safe: the virtual media ejected, the one-time boot override cleared and the power off, each
best effort, outside any transaction, and what happened recorded on the node's history.
A BMC that cannot be reached leaves it to the operator, saying so."""

from __future__ import annotations

from sqlalchemy import select

from gpulease.db.tables import Node
from gpulease.platform import Platform
from gpulease.ports.bmc import BmcEndpoint, BmcError
from gpulease.services.history import record_event

SAFE_OFF = "sweep:safe-off"


def safe_off(p: Platform, limit: int = 20) -> int:
    """Make failed nodes safe; returns how many were tried."""
    with p.db.read() as s:
        due = s.execute(select(Node.id, Node.name, Node.bmc_driver, Node.bmc_address,
                               Node.bmc_username, Node.bmc_password_enc)
                        .where(Node.safe_off_due.is_(True)).limit(limit)).all()
    for node_id, name, driver, address, user, sealed in due:
        bmc = p.drivers.bmc_for(driver, BmcEndpoint(name, address, user, p.box.open(sealed)))
        done, failed = [], []
        for what, act in (("media ejected", bmc.eject_media),
                          ("boot override cleared", bmc.clear_boot_override),
                          ("power off requested", bmc.power_off)):
            try:
                act()
                done.append(what)
            except BmcError as exc:
                failed.append(f"{what.split()[0]}: {exc}")
        with p.db.write() as s:
            node = s.get(Node, node_id, with_for_update=True)
            if node is None:
                continue
            node.safe_off_due = False
            text = ("left safe: " + ", ".join(done) if done
                    else "could not be left safe") + (
                f"; failed ({'; '.join(failed)}): check the server at its BMC" if failed
                else "")
            record_event(s, p.clock.now(), "node", node.id, "safe_off", actor=SAFE_OFF,
                         message=text[:1000])
    return len(due)

"""What keeps a node out of the pool: a node that held a tenant's data enters it only
through a certified erase of its disks since, and a node with a fault that a ticket reports
only after its repair (or the ticket's resolution). The node lifecycle asks this before
every move into `available` (its entry check, domain/states.py)."""

from __future__ import annotations


def erase_due(node: object) -> str | None:
    """A node that held a tenant's data enters the pool only through a certified erase of
    its disks since (the clean's ERASE step clears the mark; binding sets it)."""
    since = getattr(node, "erase_due_since", None)
    if since is None:
        return None
    return (f"it has held a tenant's data since {since:%Y-%m-%d %H:%M} UTC with no certified "
            "erase after: it is erased first (`gpulease node resume` starts the erase)")


def fault_reported(node: object) -> str | None:
    """A node whose fault a ticket reports enters the pool only once it is repaired or the
    ticket is resolved (services/support/repairs.py clears the mark)."""
    ticket = getattr(node, "fault_ticket_id", None)
    if ticket is None:
        return None
    return (f"ticket {ticket} reports a fault on it: it goes for repair first (`gpulease node "
            "repair`), or the ticket is resolved")


def pool_refusal(node: object) -> str | None:
    """Why a node may not enter the pool, or None."""
    return erase_due(node) or fault_reported(node)

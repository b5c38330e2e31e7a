"""Erase is an invariant: a node that held a tenant's data enters the pool only through a
certified erase of its disks since. The node lifecycle asks this before every move into
`available` (its entry check, domain/states.py)."""

from __future__ import annotations


def erase_due(node: object) -> str | None:
    """A node that held a tenant's data enters the pool only through a certified erase of
    its disks since (the clean's ERASE step clears the mark; binding sets it)."""
    since = getattr(node, "erase_due_since", None)
    if since is None:
        return None
    return (f"it has held a tenant's data since {since:%Y-%m-%d %H:%M} UTC with no certified "
            "erase after: it is erased first (`gpulease node resume` starts the erase)")

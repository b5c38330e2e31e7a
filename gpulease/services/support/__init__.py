"""When hardware fails a tenant: tickets with their SLA clocks, whole-machine replacement
(with the data disk copied), card repairs in a window the tenant accepts, and the repair
loop back to the pool."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "tickets",
    "ticket_entries",
    "repairs",
)

"""Orders: a request checked against the catalog, then placed in one transaction (the
instance, its nodes or GPUs claimed through lifecycle/binding.py, its history, the hold on
its first period)."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "instances",
)

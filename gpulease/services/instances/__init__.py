"""A tenant's instances once ordered: their views (one, a page, the change marker a follower
reads) and what a tenant does to one (release, the root password once). Effects: a release
hands the instance to the worker at once."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES: tuple[str, ...] = ("power_actions",)

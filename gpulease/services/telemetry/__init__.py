"""GPU telemetry from the node agents: pushes checked and stored per minute, series for
charts, retention with downsampling, and idle GPUs (shares and notices)."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "telemetry_summaries",
    "telemetry_hourly",
    "idle_notices",
)

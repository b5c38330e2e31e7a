"""The provider's servers: nodes and their GPUs, fabrics and racks, enrollment by BMC,
operators' node actions and changes, network boot, the deploy circuit breaker, the BMC's
health and logs, and hardware alerts."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "nodes",
    "gpus",
    "fabrics",
    "racks",
    "circuit_breakers",
    "hardware_alerts",
    "ramdisk_boots",
)

"""The node agents seen from the control plane: their credentials (a one-time enrollment
token traded for the agent's own), the command queue the real agent works from, which
agent answers for a node, and what agents prove (acceptance reports, erase certificates).
Effects: a node changing hands ends its agent's credential."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "node_agents",
    "agent_enrollments",
    "agent_commands",
    "acceptance_reports",
    "erase_certificates",
)

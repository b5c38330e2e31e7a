"""Who may do what: tenants, their users and API tokens, console sign-in, password resets,
and the operator's tenant list (suspension, reinstatement, closing) and GPU quotas."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "tenants",
    "users",
    "api_tokens",
    "password_resets",
    "gpu_quotas",
)

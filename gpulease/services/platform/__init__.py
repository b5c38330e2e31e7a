"""What the platform itself keeps: the audit trail and its writer, the outbox and its
delivery by e-mail and webhook, the egress guard, the secret key's fingerprint and
rotation, the worker registry, the control plane's metrics, and idempotency keys."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "audit_log",
    "audit_head",
    "lease_notices",
    "tenant_webhooks",
    "platform_facts",
    "worker_processes",
    "idempotency_keys",
)

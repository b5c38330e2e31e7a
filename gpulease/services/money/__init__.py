"""Where money moves: the prepaid wallet and its ledger, leases and their periods and
renewals, add-ons, metering and its bounds, SLA credits, spending and dunning, billing
profiles, payments, release terms, and invoices/ (the monthly run, reading them, CSV and
PDF). Effects: an instance's delivery charges its hold and starts its lease; a failure or
early release gives money back; a lease whose grace ran out releases its instance."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "wallets",
    "ledger_entries",
    "leases",
    "lease_periods",
    "instance_addons",
    "usage_records",
    "sla_claims",
    "billing_profiles",
    "invoices",
    "invoice_lines",
    "invoice_runs",
    "invoice_sequences",
    "budgets",
    "budget_notices",
)

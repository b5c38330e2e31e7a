"""Tenants' data: their buckets and keys on the object store (metered, bounded by quota),
backups and restores of a rented server's data disk with their policy, and saved container
images."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "storage_accounts",
    "storage_keys",
    "backups",
    "backup_policies",
    "saved_images",
)

"""What is for sale: offers with today's prices and live stock, OS images, the published
catalog's versions, quotes, and the sizing advisor over them."""

# The tables this family owns: only its modules insert, update or delete their rows
# (tests/test_structure.py; the lifecycle writer, the binding writer and the claims
# move status, binding and claim columns for every family).
TABLES = (
    "catalog_versions",
    "custom_images",
)

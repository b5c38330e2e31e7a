"""Redfish trees of vendors' published shapes, written as static mockups and served on
127.0.0.1 (tests/drivers/redfish/ and bench/redfish.py): a mockup server, the vendor-shaped
trees, and a server that honours `$expand` and counts every request."""

"""What the tests and the benches build with: platforms on a fresh SQLite file or
PostgreSQL schema (`platforms`), callers of each role (`callers`), rented machines and
their nodes (`factories`), a clock that moves when told (`clock`) and a live API server
on loopback (`servers`). Nothing here imports a test framework; the fixtures that use it
are in tests/conftest.py."""

"""The families of services, each owning its tables (`TABLES` in its __init__): accounts,
catalog, orders, instances, agents, fleet, telemetry, money, support, storage, platform.
A family does its work in transactions of its own, calls the domain to decide and the
lifecycle writers to move status, stage and a node's binding."""

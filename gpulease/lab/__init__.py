"""The lab: virtual servers on this machine behind a real Redfish BMC (sushy-tools' libvirt
driver on loopback), enrolled like any server. For trying deliveries end to end without
hardware, and for the tests that do (docs/operations.md, "The lab")."""

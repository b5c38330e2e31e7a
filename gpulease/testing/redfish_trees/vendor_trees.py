"""Redfish trees shaped as vendors publish them, written from their public layouts, for
sushy-static to serve over HTTP. Each carries what a tidy emulator does not:

- `write_dell_like`: an iDRAC-style XE9680: GPUs only under the chassis' PCIeDevices (with
  PCIeFunctions of class ProcessingAccelerators, maker "Nvidia(R) Corporation"), CPUs
  without thread counts, a storage controller without MemberId, a NIC listed again as a
  VLAN and the BMC's USB host interface among the Ethernet interfaces, iDRAC virtual media
  (CD and RemovableDisk), UEFI HTTP among the boot targets.
  An onboard Matrox VGA among the PCIe devices, a display controller like the GPUs.
- `write_supermicro_like`: GPUs as Processors of type GPU (A100s) and the BMC's ASPEED VGA
  listed among them as a GPU too, SimpleStorage only with
  two 480 GB SATA drives, a manager with a CD slot only, no boot-target list.
- `write_huawei_like`: an iBMC-style Atlas 800T A2: Ascend 910B NPUs as Processors of type
  Accelerator, a drive listed but not served, the virtual host NIC marked Virtual.

With tests/drivers/redfish/mockup.py's Inspur-style tree (GPUs under Processors and the
system's PCIe devices), four shapes.
"""

from __future__ import annotations

from pathlib import Path

from gpulease.testing.redfish_trees.mockup import R, _collection, _write


def _system(root: Path, path: str, **doc: object) -> None:
    _write(root, path, {"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
                        "PowerState": "Off", "Actions": {"#ComputerSystem.Reset": {
                            "target": f"{path}/Actions/ComputerSystem.Reset",
                            "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}},
                        **doc})


def _root(root: Path, system: str, chassis: str, manager: str) -> None:
    _write(root, R, {"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.17.0",
                     "Systems": {"@odata.id": f"{R}/Systems"},
                     "Chassis": {"@odata.id": f"{R}/Chassis"},
                     "Managers": {"@odata.id": f"{R}/Managers"}})
    _collection(root, f"{R}/Systems", [system])
    _collection(root, f"{R}/Chassis", [chassis])
    _collection(root, f"{R}/Managers", [manager])


def _virtual_media(root: Path, manager: str, slots: dict[str, list[str]]) -> None:
    _write(root, manager, {"@odata.type": "#Manager.v1_10_0.Manager", "Id": manager.rsplit(
        "/", 1)[-1], "Name": "Manager", "ManagerType": "BMC",
        "VirtualMedia": {"@odata.id": f"{manager}/VirtualMedia"}})
    paths = [f"{manager}/VirtualMedia/{name}" for name in slots]
    _collection(root, f"{manager}/VirtualMedia", paths)
    for (name, types), path in zip(slots.items(), paths, strict=True):
        _write(root, path, {"@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "Id": name,
                            "Name": name, "MediaTypes": types, "Inserted": False,
                            "Image": None, "WriteProtected": True})


def write_dell_like(root: Path, serial: str = "CN7X9X2", gpus: int = 8) -> None:
    system = f"{R}/Systems/System.Embedded.1"
    chassis = f"{R}/Chassis/System.Embedded.1"
    manager = f"{R}/Managers/iDRAC.Embedded.1"
    _root(root, system, chassis, manager)
    _system(root, system, Id="System.Embedded.1", Name="System", Manufacturer="Dell Inc.",
            Model="PowerEdge XE9680", SerialNumber=serial,
            UUID="4c4c4544-0047-3810-8035-" + serial.encode().hex()[-12:],
            MemorySummary={"TotalSystemMemoryGiB": 2048},
            ProcessorSummary={"Count": 2, "Model": "Intel(R) Xeon(R) Platinum 8468"},
            Processors={"@odata.id": f"{system}/Processors"},
            EthernetInterfaces={"@odata.id": f"{system}/EthernetInterfaces"},
            Storage={"@odata.id": f"{system}/Storage"},
            Boot={"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
                  "BootSourceOverrideTarget@Redfish.AllowableValues": [
                      "None", "Pxe", "Cd", "Hdd", "BiosSetup", "UefiHttp"]},
            Links={"Chassis": [{"@odata.id": chassis}], "ManagedBy": [{"@odata.id": manager}]})
    cpus = [f"{system}/Processors/CPU.Socket.{i}" for i in (1, 2)]
    _collection(root, f"{system}/Processors", cpus)
    for path in cpus:  # iDRAC lists cores; this one leaves the thread count out
        _write(root, path, {"Id": path.rsplit("/", 1)[-1], "ProcessorType": "CPU",
                            "Manufacturer": "Intel", "TotalCores": 48,
                            "Model": "Intel(R) Xeon(R) Platinum 8468"})
    nics = {"NIC.Integrated.1-1-1": ("Integrated NIC 1 Port 1", "b0:7b:25:aa:00:01"),
            "NIC.Integrated.1-1-1.VLAN10": ("VLAN 10 of NIC.Integrated.1-1-1",
                                            "b0:7b:25:aa:00:01"),
            "NIC.Integrated.1-2-1": ("Integrated NIC 1 Port 2", "b0:7b:25:aa:00:02"),
            "ToManager": ("Host Interface to iDRAC (USB NIC)", "b0:7b:25:aa:ff:fe")}
    paths = [f"{system}/EthernetInterfaces/{n}" for n in nics]
    _collection(root, f"{system}/EthernetInterfaces", paths)
    for (ident, (name, mac)), path in zip(nics.items(), paths, strict=True):
        _write(root, path, {"Id": ident, "Name": name, "MACAddress": mac.upper(),
                            "PermanentMACAddress": mac.upper()})
    storage = f"{system}/Storage/RAID.SL.3-1"
    _collection(root, f"{system}/Storage", [storage])
    drives = [f"{chassis}/Drives/Disk.Bay.{i}" for i in range(2)]
    _write(root, storage, {"@odata.type": "#Storage.v1_9_0.Storage", "Id": "RAID.SL.3-1",
                           "Name": "PERC H965i",  # a controller entry without MemberId
                           "StorageControllers": [{"Name": "PERC H965i",
                                                   "SupportedRAIDTypes": ["RAID1"]}],
                           "Drives": [{"@odata.id": d} for d in drives]})
    for i, path in enumerate(drives):
        _write(root, path, {"Id": f"Disk.Bay.{i}", "Name": f"NVMe Drive {i}",
                            "CapacityBytes": 7_681_501_126_656, "MediaType": "SSD",
                            "Protocol": "NVMe", "SerialNumber": f"S6CNNA0T{i:04d}"})
    _write(root, chassis, {"@odata.type": "#Chassis.v1_21_0.Chassis",
                           "Id": "System.Embedded.1", "Name": "Computer System Chassis",
                           "ChassisType": "RackMount",
                           "PCIeDevices": {"@odata.id": f"{chassis}/PCIeDevices"},
                           "Links": {"ComputerSystems": [{"@odata.id": system}]}})
    devices = [f"{chassis}/PCIeDevices/{i}-0" for i in range(gpus)]
    vga = f"{chassis}/PCIeDevices/3-0-vga"  # the onboard display controller, listed too
    _collection(root, f"{chassis}/PCIeDevices", [*devices, vga])
    _write(root, vga, {"@odata.type": "#PCIeDevice.v1_11_0.PCIeDevice", "Id": "3-0-vga",
                       "Name": "Integrated Matrox G200eW3 Graphics Controller",
                       "Manufacturer": "Matrox Electronics Systems Ltd.",
                       "PCIeFunctions": {"@odata.id": f"{vga}/PCIeFunctions"}})
    _collection(root, f"{vga}/PCIeFunctions", [f"{vga}/PCIeFunctions/3-0-0"])
    _write(root, f"{vga}/PCIeFunctions/3-0-0", {
        "Id": "3-0-0", "DeviceClass": "DisplayController", "ClassCode": "0x030000",
        "VendorId": "0x102b", "DeviceId": "0x0536"})
    for i, path in enumerate(devices):
        fn = f"{path}/PCIeFunctions/{i}-0-0"
        _write(root, path, {"@odata.type": "#PCIeDevice.v1_11_0.PCIeDevice", "Id": f"{i}-0",
                            "Name": "GH100 [H100 SXM5 80GB]",
                            "Manufacturer": "Nvidia(R) Corporation",
                            "Model": "NVIDIA H100 80GB HBM3",
                            "PCIeInterface": {"PCIeType": "Gen5", "LanesInUse": 16,
                                              "MaxPCIeType": "Gen5", "MaxLanes": 16},
                            "PCIeFunctions": {"@odata.id": f"{path}/PCIeFunctions"}})
        _collection(root, f"{path}/PCIeFunctions", [fn])
        _write(root, fn, {"Id": f"{i}-0-0", "DeviceClass": "ProcessingAccelerators",
                          "VendorId": "0x10de", "DeviceId": "0x2330"})
    _virtual_media(root, manager, {"CD": ["CD", "DVD"], "RemovableDisk": ["USBStick"]})
    # iDRAC keeps its SEL under the manager; the manager document is rewritten to link it
    _write(root, manager, {"@odata.type": "#Manager.v1_10_0.Manager",
                           "Id": "iDRAC.Embedded.1", "Name": "Manager", "ManagerType": "BMC",
                           "VirtualMedia": {"@odata.id": f"{manager}/VirtualMedia"},
                           "LogServices": {"@odata.id": f"{manager}/LogServices"}})
    _collection(root, f"{manager}/LogServices", [f"{manager}/LogServices/Sel"])
    _write(root, f"{manager}/LogServices/Sel", {
        "Id": "Sel", "Name": "SEL Log",
        "Entries": {"@odata.id": f"{manager}/LogServices/Sel/Entries"}})
    write_sel(root, [])


def write_sel(root: Path, entries: list[tuple[str, str, str, str]], page_size: int = 0
              ) -> None:
    """The Dell-like tree's SEL: (created, severity, message, message id), oldest first;
    with `page_size`, in pages linked by `Members@odata.nextLink` (as iDRAC pages a long
    log), each page a document of its own."""
    path = f"{R}/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"
    members = [{"@odata.id": f"{path}/{i + 1}", "Id": str(i + 1), "Created": created,
                "Severity": severity, "Message": message, "MessageId": mid,
                "EntryType": "SEL"}
               for i, (created, severity, message, mid) in enumerate(entries)]
    size = page_size or max(len(members), 1)
    pages = [members[i:i + size] for i in range(0, len(members), size)] or [[]]
    for n, page in enumerate(pages):
        doc: dict[str, object] = {"Name": "Log Entry Collection",
                                  "Members@odata.count": len(entries), "Members": page}
        if n + 1 < len(pages):
            doc["Members@odata.nextLink"] = f"{path}/Page{n + 2}"
        _write(root, path if n == 0 else f"{path}/Page{n + 1}", doc)


def write_supermicro_like(root: Path, serial: str = "S421903X3A12345") -> None:
    system = f"{R}/Systems/1"
    chassis = f"{R}/Chassis/1"
    manager = f"{R}/Managers/1"
    _root(root, system, chassis, manager)
    _system(root, system, Id="1", Name="System", Manufacturer="Supermicro",
            Model="SYS-821GE-TNHR", SerialNumber=serial,
            UUID="00000000-0000-0000-0000-ac1f6b" + serial.encode().hex()[-6:],
            MemorySummary={"TotalSystemMemoryGiB": 2048},
            ProcessorSummary={"Count": 2},
            Processors={"@odata.id": f"{system}/Processors"},
            SimpleStorage={"@odata.id": f"{system}/SimpleStorage"},
            Boot={"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None"},
            Links={"Chassis": [{"@odata.id": chassis}], "ManagedBy": [{"@odata.id": manager}]})
    procs = [f"{system}/Processors/{i}" for i in range(11)]
    _collection(root, f"{system}/Processors", procs)
    for i, path in enumerate(procs):
        if i == 10:  # the BMC's own VGA, listed among the processors as a GPU
            _write(root, path, {"Id": str(i), "ProcessorType": "GPU",
                                "Manufacturer": "ASPEED Technology, Inc.",
                                "Model": "ASPEED Graphics Family (AST2600 VGA)"})
        elif i < 2:
            _write(root, path, {"Id": str(i), "ProcessorType": "CPU", "Manufacturer": "Intel",
                                "TotalCores": 56, "TotalThreads": 112,
                                "Model": "Intel(R) Xeon(R) Platinum 8480+"})
        else:
            _write(root, path, {"Id": str(i), "ProcessorType": "GPU",
                                "Manufacturer": "NVIDIA", "Model": "NVIDIA A100-SXM4-80GB"})
    _collection(root, f"{system}/SimpleStorage", [f"{system}/SimpleStorage/1"])
    _write(root, f"{system}/SimpleStorage/1", {
        "Id": "1", "Name": "SATA Controller", "Devices": [
            {"Name": f"SATA disk {i}", "CapacityBytes": 480_103_981_056,
             "Status": {"State": "Enabled"}} for i in range(2)]})
    _write(root, chassis, {"@odata.type": "#Chassis.v1_14_0.Chassis", "Id": "1",
                           "Name": "Chassis", "ChassisType": "RackMount",
                           "Links": {"ComputerSystems": [{"@odata.id": system}]}})
    _virtual_media(root, manager, {"CD1": ["CD"]})


def write_huawei_like(root: Path, serial: str = "2102313XYZ10N4000123") -> None:
    """An iBMC-style Atlas 800T A2: eight Ascend 910B NPUs as Processors of type
    Accelerator (maker "Huawei Technologies Co., Ltd."), four Kunpeng CPUs with threads,
    NVMe drives on two controllers (one unreadable), the iBMC's virtual host NIC marked
    EthernetInterfaceType Virtual, virtual media with CD and USB."""
    system = f"{R}/Systems/1"
    chassis = f"{R}/Chassis/1"
    manager = f"{R}/Managers/1"
    _root(root, system, chassis, manager)
    _system(root, system, Id="1", Name="Computer System", Manufacturer="Huawei",
            Model="Atlas 800T A2", SerialNumber=serial,
            UUID="f8a9e2c1-7b3d-11ee-8000-" + serial.encode().hex()[-12:],
            MemorySummary={"TotalSystemMemoryGiB": 2048},
            Processors={"@odata.id": f"{system}/Processors"},
            EthernetInterfaces={"@odata.id": f"{system}/EthernetInterfaces"},
            Storage={"@odata.id": f"{system}/Storages"},
            Boot={"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
                  "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Cd",
                                                                       "Hdd"]},
            Links={"Chassis": [{"@odata.id": chassis}], "ManagedBy": [{"@odata.id": manager}]})
    procs = [f"{system}/Processors/{n}" for n in
             [f"CPU{i}" for i in range(1, 5)] + [f"NPU{i}" for i in range(1, 9)]]
    _collection(root, f"{system}/Processors", procs)
    for path in procs:
        ident = path.rsplit("/", 1)[-1]
        if ident.startswith("CPU"):
            _write(root, path, {"Id": ident, "ProcessorType": "CPU", "Manufacturer": "HiSilicon",
                                "Model": "Kunpeng 920 7285Z", "TotalCores": 96,
                                "TotalThreads": 96})
        else:
            _write(root, path, {"Id": ident, "ProcessorType": "Accelerator",
                                "Manufacturer": "Huawei Technologies Co., Ltd.",
                                "Model": "Ascend 910B", "SerialNumber": f"NPU{ident}"})
    nics = {"mainboardLOMPort1": ("Physical", "f4:1d:6b:00:00:01"),
            "mainboardLOMPort2": ("Physical", "f4:1d:6b:00:00:02"),
            "veth": ("Virtual", "f4:1d:6b:00:00:ff")}
    paths = [f"{system}/EthernetInterfaces/{n}" for n in nics]
    _collection(root, f"{system}/EthernetInterfaces", paths)
    for (ident, (kind, mac)), path in zip(nics.items(), paths, strict=True):
        _write(root, path, {"Id": ident, "Name": ident, "EthernetInterfaceType": kind,
                            "MACAddress": mac, "PermanentMACAddress": mac})
    storages = [f"{system}/Storages/RAIDStorage0", f"{system}/Storages/NVMeStorage"]
    _collection(root, f"{system}/Storages", storages)
    _write(root, storages[0], {"Id": "RAIDStorage0", "Name": "RAID card",
                               "Drives": [{"@odata.id": f"{chassis}/Drives/HDDPlaneDisk9"}]})
    drives = [f"{chassis}/Drives/NVMeDisk{i}" for i in range(2)]
    _write(root, storages[1], {"Id": "NVMeStorage", "Name": "NVMe",
                               "Drives": [{"@odata.id": d} for d in drives]})
    for i, path in enumerate(drives):
        _write(root, path, {"Id": f"NVMeDisk{i}", "Name": f"Disk{i}",
                            "CapacityBytes": 3_840_755_982_336, "Protocol": "NVMe"})
    # HDDPlaneDisk9 is listed but not served: a drive the BMC cannot read
    _write(root, chassis, {"@odata.type": "#Chassis.v1_14_0.Chassis", "Id": "1",
                           "Name": "Chassis", "ChassisType": "RackMount",
                           "Links": {"ComputerSystems": [{"@odata.id": system}]}})
    _virtual_media(root, manager, {"CD": ["CD", "DVD"], "USBStick": ["USBStick"]})

"""A Redfish mockup of an 8-GPU server, served by sushy-tools' `sushy-static` (a real
HTTP Redfish peer that serves a mockup tree): GPUs as Processors of type GPU, PCIe devices
(GPUs, InfiniBand adapters) with their links and functions, chassis temperatures and fans.
The emulator (`sushy-emulator`) lists none of these, so the hardware inventory is tested
here, the rest against the emulator."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpulease.testing.servers import free_port

R = "/redfish/v1"


def _write(root: Path, path: str, doc: dict[str, Any]) -> None:
    target = root / path.removeprefix(R).lstrip("/") / "index.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"@odata.id": path, **doc}))


def _collection(root: Path, path: str, members: list[str]) -> None:
    _write(root, path, {"Name": path.rsplit("/", 1)[-1],
                        "Members": [{"@odata.id": m} for m in members],
                        "Members@odata.count": len(members)})


def write_mockup(root: Path, gpus: int = 8, slow_slot: int | None = 3,
                 hot_psu: bool = True, serial: str = "INSP-H100-0001") -> None:
    """An Inspur-like H100 server: 2 CPUs, `gpus` H100s (GPU `slow_slot` reads Gen4 x8),
    4 ConnectX-7 InfiniBand ports, 2 Ethernet NICs, 2 TB memory, a hot PSU sensor."""
    system = f"{R}/Systems/1"
    _write(root, R, {"Id": "RootService", "Name": "Root Service", "RedfishVersion": "1.15.0",
                     "UUID": "92384634-2938-2342-8820-489239905423",
                     "Systems": {"@odata.id": f"{R}/Systems"},
                     "Chassis": {"@odata.id": f"{R}/Chassis"},
                     "Managers": {"@odata.id": f"{R}/Managers"}})
    _collection(root, f"{R}/Systems", [system])
    _collection(root, f"{R}/Chassis", [f"{R}/Chassis/1"])
    _collection(root, f"{R}/Managers", [])
    _write(root, system, {
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1",
        "Name": "gpu-server", "Manufacturer": "Inspur", "Model": "NF5688M7",
        "SerialNumber": serial, "UUID": f"4c4c4544-0000-1000-8000-{serial.encode().hex()[-12:]}",
        "PowerState": "On",
        "MemorySummary": {"TotalSystemMemoryGiB": 2048},
        "ProcessorSummary": {"Count": 2, "Model": "Intel Xeon Platinum 8480+"},
        "Processors": {"@odata.id": f"{system}/Processors"},
        "EthernetInterfaces": {"@odata.id": f"{system}/EthernetInterfaces"},
        "PCIeDevices": {"@odata.id": f"{system}/PCIeDevices"},
        "Links": {"Chassis": [{"@odata.id": f"{R}/Chassis/1"}]},
        "Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None"},
        "Actions": {"#ComputerSystem.Reset": {
            "target": f"{system}/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown",
                                                   "ForceRestart"]}}})
    cpus = [f"{system}/Processors/CPU{i}" for i in range(2)]
    gpu_paths = [f"{system}/Processors/GPU{i}" for i in range(gpus)]
    _collection(root, f"{system}/Processors", cpus + gpu_paths)
    for i, path in enumerate(cpus):
        _write(root, path, {"Id": f"CPU{i}", "Name": f"CPU {i}", "ProcessorType": "CPU",
                            "Manufacturer": "Intel(R) Corporation",
                            "Model": "Intel Xeon Platinum 8480+", "TotalCores": 56})
    for i, path in enumerate(gpu_paths):
        _write(root, path, {"Id": f"GPU{i}", "Name": f"GPU {i}", "ProcessorType": "GPU",
                            "Manufacturer": "NVIDIA Corporation",
                            "Model": "NVIDIA H100 80GB HBM3",
                            "SerialNumber": f"165322{i:06d}"})
    nics = [f"{system}/EthernetInterfaces/{n}" for n in ("eth0", "eth1")]
    _collection(root, f"{system}/EthernetInterfaces", nics)
    for n, path in enumerate(nics):
        _write(root, path, {"Id": path.rsplit("/", 1)[-1], "Name": "Ethernet",
                            "MACAddress": f"b8:3f:d2:00:00:0{n}", "LinkStatus": "LinkUp"})
    devices = []
    for i in range(gpus):
        slow = i == slow_slot
        devices.append((f"GPU{i}", "NVIDIA", "H100 SXM5 80GB", "ProcessingAccelerators",
                        "0x10DE", "Gen4" if slow else "Gen5", 8 if slow else 16))
    for i in range(4):
        devices.append((f"IB{i}", "Mellanox Technologies", "ConnectX-7 NDR 400G",
                        "NetworkController", "0x15B3", "Gen5", 16))
    paths = [f"{system}/PCIeDevices/{d[0]}" for d in devices]
    _collection(root, f"{system}/PCIeDevices", paths)
    for (ident, maker, model, klass, vendor, gen, lanes), path in zip(devices, paths,
                                                                       strict=True):
        _write(root, path, {
            "@odata.type": "#PCIeDevice.v1_9_0.PCIeDevice", "Id": ident, "Name": ident,
            "Manufacturer": maker, "Model": model, "DeviceType": "SingleFunction",
            "PCIeInterface": {"PCIeType": gen, "LanesInUse": lanes, "MaxPCIeType": "Gen5",
                              "MaxLanes": 16},
            "PCIeFunctions": {"@odata.id": f"{path}/PCIeFunctions"}})
        _collection(root, f"{path}/PCIeFunctions", [f"{path}/PCIeFunctions/0"])
        _write(root, f"{path}/PCIeFunctions/0", {
            "Id": "0", "Name": "Function 0", "DeviceClass": klass, "VendorId": vendor,
            "DeviceId": "0x2330" if vendor == "0x10DE" else "0x1021", "FunctionId": 0})
    _write(root, f"{R}/Chassis/1", {
        "@odata.type": "#Chassis.v1_14_0.Chassis", "Id": "1", "Name": "Chassis",
        "ChassisType": "RackMount", "Thermal": {"@odata.id": f"{R}/Chassis/1/Thermal"},
        "Links": {"ComputerSystems": [{"@odata.id": system}]}})
    temps = [{"MemberId": str(i), "Name": f"GPU{i} Temp", "ReadingCelsius": 40 + i,
              "UpperThresholdCritical": 87, "Status": {"State": "Enabled", "Health": "OK"}}
             for i in range(gpus)]
    temps.append({"MemberId": "inlet", "Name": "Inlet Temp", "ReadingCelsius": 24,
                  "UpperThresholdCritical": 45, "Status": {"State": "Enabled",
                                                           "Health": "OK"}})
    if hot_psu:
        temps.append({"MemberId": "psu2", "Name": "PSU2 Temp", "ReadingCelsius": 96,
                      "UpperThresholdCritical": 90,
                      "Status": {"State": "Enabled", "Health": "Critical"}})
    fans = [{"MemberId": str(i), "Name": f"Fan{i}", "Reading": 9000 + 100 * i,
             "ReadingUnits": "RPM", "Status": {"State": "Enabled", "Health": "OK"}}
            for i in range(4)]
    _write(root, f"{R}/Chassis/1/Thermal", {
        "@odata.type": "#Thermal.v1_7_0.Thermal", "Id": "Thermal", "Name": "Thermal",
        "Temperatures": [{"@odata.id": f"{R}/Chassis/1/Thermal#/Temperatures/{i}", **t}
                         for i, t in enumerate(temps)],
        "Fans": [{"@odata.id": f"{R}/Chassis/1/Thermal#/Fans/{i}", **f}
                 for i, f in enumerate(fans)]})


@dataclass
class StaticBmc:
    url: str
    process: subprocess.Popen[bytes]

    @property
    def system_url(self) -> str:
        return f"{self.url}/redfish/v1/Systems/1"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def serve_mockup(root: Path) -> StaticBmc:
    port = free_port()
    exe = Path(sys.executable).with_name("sushy-static")
    proc = subprocess.Popen([str(exe), "-i", "127.0.0.1", "-p", str(port), "-m", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):  # bounded: 10 s
        try:
            if httpx.get(f"{url}/redfish/v1", timeout=1).status_code == 200:
                return StaticBmc(url, proc)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("sushy-static did not answer in 10 s")

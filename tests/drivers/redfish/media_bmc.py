"""Virtual-media trees of three vendors' shapes, served on 127.0.0.1 by a server that takes
InsertMedia and EjectMedia as each vendor's firmware does (written from their published
Redfish guides, nothing copied):
- `dell6`: iDRAC 6.x keeps the drives under the System ("1" CD/DVD, "2" USB), not the
  manager;
- `ami`: an AMI MegaRAC BMC (Inspur and others) keeps them under its manager, links an
  ActionInfo that lists TransferProtocolType, and answers 400 to an insert without it;
- `openbmc`: bmcweb has one slot (CD and USB stick alike), lists the protocols on the
  action itself, HTTPS or CIFS, and answers 400 to an http:// image.
Every action's body is kept, so a test sees what the driver sent."""

from __future__ import annotations

import copy
import http.server
import json
import threading
from typing import Any

R = "/redfish/v1"
SYSTEM = f"{R}/Systems/1"
MANAGER = f"{R}/Managers/1"


def _drive(path: str, types: list[str], action: dict[str, Any]) -> dict[str, Any]:
    return {"@odata.id": path, "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia",
            "Id": path.rsplit("/", 1)[-1], "Name": "Virtual media", "MediaTypes": types,
            "Inserted": False, "Image": None, "WriteProtected": True,
            "Actions": {"#VirtualMedia.InsertMedia": {
                "target": f"{path}/Actions/VirtualMedia.InsertMedia", **action},
                "#VirtualMedia.EjectMedia": {
                "target": f"{path}/Actions/VirtualMedia.EjectMedia"}}}


def tree(vendor: str) -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {
        R: {"@odata.id": R, "Id": "RootService", "RedfishVersion": "1.17.0",
            "Systems": {"@odata.id": f"{R}/Systems"},
            "Managers": {"@odata.id": f"{R}/Managers"}},
        f"{R}/Systems": {"@odata.id": f"{R}/Systems", "Members": [{"@odata.id": SYSTEM}]},
        f"{R}/Managers": {"@odata.id": f"{R}/Managers", "Members": [{"@odata.id": MANAGER}]},
        SYSTEM: {"@odata.id": SYSTEM, "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
                 "Id": "1", "PowerState": "Off",
                 "Links": {"ManagedBy": [{"@odata.id": MANAGER}]}},
        MANAGER: {"@odata.id": MANAGER, "@odata.type": "#Manager.v1_10_0.Manager",
                  "Id": "1", "ManagerType": "BMC"},
    }
    if vendor == "dell6":
        holder = SYSTEM
        drives = {"1": (["CD", "DVD"], {}), "2": (["USBStick"], {})}
    elif vendor == "ami":
        holder = MANAGER
        info = f"{MANAGER}/VirtualMedia/CD1/InsertMediaActionInfo"
        docs[info] = {"@odata.id": info, "@odata.type": "#ActionInfo.v1_1_2.ActionInfo",
                      "Id": "InsertMediaActionInfo", "Parameters": [
                          {"Name": "Image", "Required": True, "DataType": "String"},
                          {"Name": "TransferProtocolType", "Required": True,
                           "DataType": "String",
                           "AllowableValues": ["CIFS", "HTTP", "HTTPS", "NFS"]}]}
        drives = {"CD1": (["CD", "DVD"], {"@Redfish.ActionInfo": info}),
                  "USB1": (["USBStick"], {"@Redfish.ActionInfo": info})}
    elif vendor == "openbmc":
        holder = MANAGER
        drives = {"Slot_0": (["CD", "USBStick"], {
            "TransferProtocolType@Redfish.AllowableValues": ["HTTPS", "CIFS"]})}
    else:
        raise ValueError(vendor)
    collection = f"{holder}/VirtualMedia"
    docs[holder]["VirtualMedia"] = {"@odata.id": collection}
    docs[collection] = {"@odata.id": collection,
                        "Members": [{"@odata.id": f"{collection}/{n}"} for n in drives]}
    for name, (types, action) in drives.items():
        docs[f"{collection}/{name}"] = _drive(f"{collection}/{name}", types, action)
    return docs


class MediaBmc:
    """`tasks`: an insert is answered 202 with a task monitor that says 202 (Retry-After:
    0) `polls` times, then is done (204), or, with `task_fails`, ends in Exception."""

    def __init__(self, vendor: str, tasks: bool = False, task_fails: bool = False) -> None:
        self.vendor, self.docs = vendor, tree(vendor)
        self.tasks, self.task_fails, self.polls = tasks, task_fails, 2
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.monitor_gets = 0
        self._pending: tuple[dict[str, Any], dict[str, Any]] | None = None
        bmc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, doc: dict[str, Any] | None = None) -> None:
                body = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                if self.path.startswith(f"{R}/TaskService/TaskMonitors/"):
                    return bmc.monitor(self)
                doc = bmc.docs.get(self.path.split("?")[0].rstrip("/") or "/")
                self._answer(200 if doc is not None else 404, doc or {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.rstrip("/")
                drive_path, _, action = path.rpartition("/Actions/")
                drive = bmc.docs.get(drive_path)
                if drive is None:  # sessions too: sushy then uses basic authentication
                    return self._answer(404, {})
                bmc.posts.append((path, body))
                refusal = bmc.refusal(action, body)
                if refusal is not None:
                    return self._answer(400, {"error": {"code": "Base.1.8.GeneralError",
                                                        "message": refusal}})
                if action == "VirtualMedia.InsertMedia" and bmc.tasks:
                    bmc._pending = (drive, body)  # mounted when the task is done
                    self.send_response(202)
                    self.send_header("Location", f"{R}/TaskService/TaskMonitors/1")
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                if action == "VirtualMedia.InsertMedia":
                    drive.update(Inserted=True, Image=body["Image"])
                else:
                    drive.update(Inserted=False, Image=None)
                self._answer(204)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def monitor(self, handler: Any) -> None:
        self.monitor_gets += 1
        if self.monitor_gets <= self.polls:
            handler.send_response(202)
            handler.send_header("Retry-After", "0")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if self.task_fails:
            return handler._answer(200, {"TaskState": "Exception", "Messages": [
                {"Message": "Unable to mount the remote image: connection refused"}]})
        assert self._pending is not None
        drive, body = self._pending
        drive.update(Inserted=True, Image=body["Image"])
        handler._answer(204)

    def refusal(self, action: str, body: dict[str, Any]) -> str | None:
        if action != "VirtualMedia.InsertMedia":
            return None
        if self.vendor == "ami" and "TransferProtocolType" not in body:
            return ("The action VirtualMedia.InsertMedia requires the parameter "
                    "TransferProtocolType to be present in the request body.")
        if self.vendor == "openbmc" and not str(body.get("Image", "")).startswith(
                ("https://", "smb://")):
            return "Image URL scheme not supported: use https or smb"
        return None

    def drive(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(next(d for p, d in self.docs.items()
                                  if p.endswith(f"/VirtualMedia/{name}")))

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

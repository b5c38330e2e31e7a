"""A Redfish peer that pushes events, as iDRAC, iLO and iBMC do: it serves a mockup tree
(the files vendor_trees.py writes) over real HTTP, adds an EventService to the service
root, keeps the subscriptions a client POSTs (201 with a Location), and delivers an Event
to each subscription's Destination with its Context, as the BMC would on a fault. Loopback
only; the tests' destinations are the platform's own test server."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import httpx

R = "/redfish/v1"
SERVICE = f"{R}/EventService"
SUBSCRIPTIONS = f"{SERVICE}/Subscriptions"


class EventingBmc:
    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.root = root
        self.enabled = enabled
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.posted: list[str] = []  # the paths of every POST (power, media, subscriptions)
        self._next = 1
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def drop_subscriptions(self) -> None:
        """What a BMC does after its deliveries failed too often."""
        with self._lock:
            self.subscriptions.clear()

    def fire(self, severity: str, message: str, message_id: str = "PDR1001",
             event_id: str = "1") -> list[int]:
        """Deliver one Alert to every subscriber; the status each answered."""
        with self._lock:
            subscribers = list(self.subscriptions.values())
        answers = []
        for sub in subscribers:
            event = {"@odata.type": "#Event.v1_7_0.Event", "Id": event_id, "Name": "Event",
                     "Context": sub["Context"], "Events": [{
                         "EventType": "Alert", "EventId": event_id,
                         "EventTimestamp": "2026-12-01T10:00:00Z",
                         "MessageSeverity": severity, "Message": message,
                         "MessageId": f"IDRAC.2.9.{message_id}",
                         "OriginOfCondition": {"@odata.id": f"{R}/Systems/System.Embedded.1"},
                     }]}
            answers.append(httpx.post(sub["Destination"], json=event, timeout=10).status_code)
        return answers

    # -- the HTTP side ------------------------------------------------------------
    def _document(self, path: str) -> dict[str, Any] | None:
        path = path.split("?", 1)[0].rstrip("/")
        if path == SERVICE:
            return {"@odata.id": SERVICE, "@odata.type": "#EventService.v1_7_0.EventService",
                    "Id": "EventService", "Name": "Event Service",
                    "ServiceEnabled": self.enabled, "DeliveryRetryAttempts": 3,
                    "EventTypesForSubscription": ["Alert", "StatusChange"],
                    "Subscriptions": {"@odata.id": SUBSCRIPTIONS}}
        if path == SUBSCRIPTIONS:
            with self._lock:
                members = [{"@odata.id": p} for p in self.subscriptions]
            return {"@odata.id": SUBSCRIPTIONS, "Name": "Subscriptions", "Members": members,
                    "Members@odata.count": len(members)}
        with self._lock:
            if path in self.subscriptions:
                sub = self.subscriptions[path]
                # the Context is readable; HttpHeaders would not be
                return {"@odata.id": path, "Id": path.rsplit("/", 1)[-1], **sub}
        file = self.root / path.removeprefix(R).lstrip("/") / "index.json"
        if not file.is_file():
            return None
        doc: dict[str, Any] = json.loads(file.read_text())
        if path == R:
            doc["EventService"] = {"@odata.id": SERVICE}
        return doc

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        bmc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, doc: dict[str, Any] | None = None,
                        headers: dict[str, str] | None = None) -> None:
                body = json.dumps(doc).encode() if doc is not None else b""
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                doc = bmc._document(self.path)
                self._answer(200, doc) if doc is not None else self._answer(404, {
                    "error": {"code": "Base.1.0.ResourceMissingAtURI",
                              "message": f"{self.path} not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                bmc.posted.append(self.path)
                if self.path.rstrip("/") != SUBSCRIPTIONS:
                    self._answer(204)  # a power or media action: accepted
                    return
                if not isinstance(body.get("Destination"), str) or not bmc.enabled:
                    self._answer(400, {"error": {"message": "Destination required"}})
                    return
                with bmc._lock:
                    path = f"{SUBSCRIPTIONS}/{bmc._next}"
                    bmc._next += 1
                    bmc.subscriptions[path] = {
                        "Destination": body["Destination"], "Context": body.get("Context"),
                        "Protocol": body.get("Protocol"),
                        "EventTypes": body.get("EventTypes") or []}
                self._answer(201, {"@odata.id": path}, {"Location": path})

            def do_PATCH(self) -> None:
                self._answer(204)

            def do_DELETE(self) -> None:
                with bmc._lock:
                    found = bmc.subscriptions.pop(self.path.rstrip("/"), None)
                self._answer(204 if found else 404)

        return Handler

"""A Redfish tree served on 127.0.0.1 by a server that honours `$expand` when told to:
collections whose members are links come back with the members inline (one level), and
the service root says so (ProtocolFeaturesSupported.ExpandQuery). Every request is counted
by path, so a test sees how many the driver sent. Sessions are not offered (sushy falls back
to basic authentication)."""

from __future__ import annotations

import http.server
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

R = "/redfish/v1"


class ExpandingTree:
    def __init__(self, root: Path, expand: bool) -> None:
        self.root, self.expand = root, expand
        self.requests: Counter[str] = Counter()  # path (without the query) → times asked
        self.queries: list[str] = []
        tree = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                parts = urlsplit(self.path)
                path = parts.path.rstrip("/") or "/"
                tree.requests[path] += 1
                if parts.query:
                    tree.queries.append(unquote(parts.query))
                doc = tree.document(path, unquote(parts.query))
                body = json.dumps(doc).encode() if doc is not None else b"{}"
                self.send_response(200 if doc is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _read(self, path: str) -> dict[str, Any] | None:
        file = self.root / path.removeprefix(R).lstrip("/") / "index.json"
        return json.loads(file.read_text()) if file.is_file() else None

    def document(self, path: str, query: str) -> dict[str, Any] | None:
        doc = self._read(path)
        if doc is None:
            return None
        if path == R and self.expand:
            doc["ProtocolFeaturesSupported"] = {"ExpandQuery": {
                "ExpandAll": True, "NoLinks": True, "Levels": True, "MaxLevels": 3}}
        if self.expand and query.startswith("$expand=") and isinstance(doc.get("Members"), list):
            doc["Members"] = [self._read(m["@odata.id"]) or m for m in doc["Members"]]
        return doc

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def link_the_members(root: Path, collection: str) -> int:
    """Rewrite a collection written with its members inline so that it only links them,
    each member a document of its own (as many BMCs serve a log); returns how many."""
    file = root / collection.removeprefix(R).lstrip("/") / "index.json"
    doc = json.loads(file.read_text())
    for member in doc["Members"]:
        target = root / member["@odata.id"].removeprefix(R).lstrip("/") / "index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(member))
    doc["Members"] = [{"@odata.id": m["@odata.id"]} for m in doc["Members"]]
    file.write_text(json.dumps(doc))
    return len(doc["Members"])

"""`gpulease node enroll`: one BMC, or many from a CSV file with a progress bar."""

from __future__ import annotations

import csv
import json
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from gpulease.cli.client import ApiError, Client
from gpulease.cli.words import _
from gpulease.schemas import EnrollRequest, NodeView


@dataclass(frozen=True)
class Server:
    """One server to enroll, as the command line or a row of the CSV file gives it: its BMC,
    the BMC's user and password file, and (optional) its offer, name, fabric, Docker
    engine, boot address, rack and SSH endpoint."""

    bmc: str
    username: str
    password_file: Path
    offer: str | None = None
    name: str | None = None
    fabric: str | None = None
    runtime: str | None = None
    boot_address: str | None = None
    rack: str | None = None
    ssh_endpoint: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, str], base: Path) -> Server:
        """A CSV row; a relative password file is found beside the CSV file."""
        pw = Path(row["password_file"])
        return cls(row["bmc"], row["username"], pw if pw.is_absolute() else base / pw,
                   row.get("offer"), row.get("name"), row.get("fabric"), row.get("runtime"),
                   row.get("boot_address"), row.get("rack"), row.get("ssh_endpoint"))

    def request(self) -> EnrollRequest:
        """A Docker engine URL makes the server a shared one: its GPUs go to containers."""
        password = self.password_file.read_text().strip()
        return EnrollRequest(bmc=self.bmc, username=self.username, password=password,
                             offer=self.offer or None, name=self.name or None,
                             fabric=self.fabric or None, runtime=self.runtime or None,
                             pool="container" if self.runtime else "bare_metal",
                             boot_address=self.boot_address or None, rack=self.rack or None,
                             ssh_endpoint=self.ssh_endpoint or None)


def _describe(node: NodeView) -> str:
    return f"{node.name}: {node.status}" + (f" — {node.status_reason}" if node.status_reason
                                           else "")


def enroll_one(client: Client, server: Server, as_json: bool, out: Console, err: Console
               ) -> int:
    try:
        node = client.enroll(server.request())
    except OSError as exc:
        err.print(_("[red]error[/red]: cannot read {path}: {error}", path=server.password_file,
                    error=exc.strerror))
        return 2
    except ValidationError as exc:
        err.print(f"[red]error[/red]: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
        return 2
    except ApiError as exc:
        err.print(_("[red]error[/red] ({status} {title}): {detail}", status=exc.status,
                    title=exc.title, detail=exc.detail))
        return 1
    if as_json:
        sys.stdout.write(node.model_dump_json(indent=2) + "\n")
    else:
        out.print(_describe(node))
    return 0


def enroll_many(client: Client, csv_file: Path, parallel: int, as_json: bool,
                out: Console, err: Console) -> int:
    try:
        rows = list(csv.DictReader(csv_file.open(newline="")))
    except OSError as exc:
        err.print(_("[red]error[/red]: cannot read {path}: {error}", path=csv_file,
                    error=exc.strerror))
        return 2
    missing = {"bmc", "username", "password_file"} - set(rows[0] if rows else {})
    if missing:
        err.print(_("[red]error[/red]: {path} lacks columns {columns}", path=csv_file,
                    columns=", ".join(sorted(missing))))
        return 2
    base = csv_file.parent
    results: list[dict[str, str]] = []

    def one(row: dict[str, str]) -> dict[str, str]:
        try:
            node = client.enroll(Server.from_row(row, base).request())
            return {"bmc": row["bmc"], "node": node.name, "status": node.status,
                    "detail": node.status_reason or ""}
        except ApiError as exc:
            return {"bmc": row["bmc"], "node": "", "status": "error", "detail": exc.detail}
        except (OSError, ValidationError) as exc:
            return {"bmc": row["bmc"], "node": "", "status": "error", "detail": str(exc)}

    with Progress(TextColumn(_("enrolling")), BarColumn(), MofNCompleteColumn(),
                  console=err, disable=as_json) as progress:
        task = progress.add_task("enroll", total=len(rows))
        with ThreadPoolExecutor(max(1, parallel)) as pool:
            for future in as_completed(pool.submit(one, r) for r in rows):
                results.append(future.result())
                progress.advance(task)
    results.sort(key=lambda r: r["bmc"])
    if as_json:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")
    else:
        table = Table(title=_("{count} BMCs", count=len(rows)))
        for col in ("bmc", _("node"), _("status"), _("detail")):
            table.add_column(col, overflow="fold")
        for r in results:
            table.add_row(r["bmc"], r["node"], r["status"], r["detail"])
        out.print(table)
    return 0 if all(r["status"] != "error" for r in results) else 1

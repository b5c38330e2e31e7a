"""A swap's direct copy (agent/copy.py: the source lists and checksums, then serves its
files in AES-256-GCM frames; the destination fetches, checks each file's SHA-256 and moves
it into place) between two directories over loopback, beside plain copies of the same
files on the same machine in the same run:
1. the baseline: `shutil.copytree` (no network, no checksum, no encryption);
2. the same bytes over plain HTTP on loopback (http.server → httpx, no checksum, no
   encryption): what the network path alone costs;
3. the direct copy, its listing (checksums) and its transfer timed apart;
4. the direct copy again onto the finished directory: what a retry that finds every file
   in place costs.
Prints JSON; there is no mark in the issue: the figures say what a swap's copy costs here.

    python bench/direct_copy.py [--files 200] [--mib 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from gpulease.agent import copy as direct
from gpulease.ports.agent import ReceivePayload, SendPayload

CHUNK = 8 << 20


def write_random(root: Path, files: int, total: int) -> list[Path]:
    """`files` files making `total` bytes: one large file holds half, the rest share."""
    big = total // 2
    small = (total - big) // max(files - 1, 1)
    made = []
    for i in range(files):
        path = root / f"step-{i // 50}" / f"shard-{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        left = big if i == 0 else small
        with path.open("wb") as f:
            while left > 0:
                n = min(CHUNK, left)
                f.write(os.urandom(n))
                left -= n
        made.append(path)
    return made


def plain_http(source: Path, dest: Path) -> float:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(
        type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
        directory=str(source)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    started = time.monotonic()
    with httpx.Client() as client:
        for path in sorted(source.rglob("*.bin")):
            rel = path.relative_to(source).as_posix()
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            port = server.server_address[1]
            with client.stream("GET", f"http://127.0.0.1:{port}/{rel}") as resp, \
                    out.open("wb") as f:
                for piece in resp.iter_bytes(1 << 20):
                    f.write(piece)
    took = time.monotonic() - started
    server.shutdown()
    server.server_close()
    return took


def direct_copy(disk_a: Path, disk_b: Path) -> dict[str, float]:
    key, listed = direct.new_key(), threading.Event()
    port: list[int] = []
    fields = dict(copy_id="bench-copy-01", path="/data/runs", port=1, key=key, wait_s=600.0)
    timings: dict[str, float] = {}

    def serve() -> None:
        started = time.monotonic()

        def listening(p: int) -> None:
            timings["listing_s"] = time.monotonic() - started
            port.append(p)
            listed.set()

        direct.serve(disk_a, SendPayload(**fields), bind=("127.0.0.1", 0),  # type: ignore[arg-type]
                     listening=listening)

    source = threading.Thread(target=serve, daemon=True)
    source.start()
    assert listed.wait(600)
    started = time.monotonic()
    got = direct.fetch(disk_b, ReceivePayload(**fields, source="127.0.0.1"),  # type: ignore[arg-type]
                       address=lambda: ("127.0.0.1", port[0]))
    timings["transfer_s"] = time.monotonic() - started
    timings["bytes_moved"] = float(got.bytes_moved)
    source.join(30)
    return timings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--mib", type=int, default=1024)
    args = ap.parse_args()
    total = args.mib << 20
    with tempfile.TemporaryDirectory(prefix="gpulease-copy-bench-") as tmp:
        root = Path(tmp)
        disk_a = root / "a"
        write_random(disk_a / "runs", args.files, total)
        mib = total / (1 << 20)

        started = time.monotonic()
        shutil.copytree(disk_a / "runs", root / "copytree")
        tree_s = time.monotonic() - started
        http_s = plain_http(disk_a / "runs", root / "http")
        first = direct_copy(disk_a, root / "b")
        again = direct_copy(disk_a, root / "b")
        direct_s = first["listing_s"] + first["transfer_s"]
        print(json.dumps({
            "bench": "direct_copy", "files": args.files, "mib": round(mib),
            "baseline_copytree": {"seconds": round(tree_s, 2),
                                  "mib_per_s": round(mib / tree_s, 1)},
            "plain_http_loopback": {"seconds": round(http_s, 2),
                                    "mib_per_s": round(mib / http_s, 1)},
            "direct_copy": {"listing_s": round(first["listing_s"], 2),
                            "transfer_s": round(first["transfer_s"], 2),
                            "seconds": round(direct_s, 2),
                            "mib_per_s": round(mib / direct_s, 1),
                            "transfer_mib_per_s": round(mib / first["transfer_s"], 1),
                            "vs_plain_http": round(http_s / first["transfer_s"], 3)},
            "retry_onto_finished": {"seconds": round(again["listing_s"] + again["transfer_s"],
                                                     2),
                                    "bytes_moved": int(again["bytes_moved"])},
        }, indent=2))


if __name__ == "__main__":
    main()

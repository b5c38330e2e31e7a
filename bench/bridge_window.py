"""Cross-tenant probes while networks come and go on a container host, printed as JSON.

Two pairs of bridge networks on the local Docker engine: a plain pair (`br-…`, kept apart
by the engine alone: the baseline) and a tenant pair (`gl-…`, as the runtime names them,
with the host's guard in place, drivers/bridge_guard.py). A container on one network of
each pair opens TCP connections to sshd on the other network's container, as fast as it
can, while other networks are created and removed on the host; a hit is a connection that
opened. The guard's dropped packets are counted too. Needs root, dockerd and the tests'
image (tests/drivers/docker/engine.py builds it).
`python bench/bridge_window.py [SECONDS, default 60]`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker

from gpulease.drivers import bridge_guard
from gpulease.drivers.docker_runtime import BRIDGE_OPTION
from tests.drivers.docker.engine import IMAGE, ensure_test_image


def _probe(container: Any, address: str, seconds: int) -> dict[str, int]:
    script = (f"end=$((SECONDS+{seconds})); n=0; h=0; while [ $SECONDS -lt $end ]; do "
              f"n=$((n+1)); timeout 0.05 bash -c 'echo > /dev/tcp/{address}/22' "
              "2>/dev/null && h=$((h+1)); done; echo $n $h")
    _, out = container.exec_run(["bash", "-c", script])
    tries, hits = out.decode().split()
    return {"tries": int(tries), "hits": int(hits)}


def _churn(client: docker.DockerClient, stop: threading.Event, tag: str) -> int:
    count = 0
    while not stop.is_set():
        client.networks.create(f"bench-churn-{tag}-{count}").remove()
        count += 1
    return count


def _guard_drops() -> int:
    import subprocess

    listing = subprocess.run(["iptables", "-w", "-t", "mangle", "-L", bridge_guard.CHAIN,
                              "-v", "-x", "-n"], capture_output=True, text=True,
                             check=True).stdout
    return sum(int(line.split()[0]) for line in listing.splitlines() if " DROP " in line)


def main(seconds: int) -> dict[str, object]:
    client = docker.from_env()
    ensure_test_image(client)
    bridge_guard.apply()
    tag = uuid.uuid4().hex[:6]
    made: list[Any] = []
    try:
        pairs: dict[str, tuple[Any, Any]] = {}
        for kind in ("plain", "guarded"):
            ends = []
            for side in ("a", "b"):
                options = ({BRIDGE_OPTION: f"gl-bw{tag}{side}"} if kind == "guarded" else {})
                net = client.networks.create(f"bench-{kind}-{side}-{tag}", options=options)
                made.append(net)
                box = client.containers.run(IMAGE, ["sleep", "3600"], detach=True,
                                            network=net.name, name=f"bench-{kind}-{side}-{tag}")
                made.insert(0, box)
                ends.append(box)
            ends[0].exec_run(["bash", "-c", "mkdir -p /run/sshd && /usr/sbin/sshd"])
            ends[0].reload()
            pairs[kind] = (ends[0], ends[1])
        drops_before = _guard_drops()
        stop = threading.Event()
        churned: list[int] = []
        churn = threading.Thread(target=lambda: churned.append(_churn(client, stop, tag)))
        results: dict[str, dict[str, int]] = {}

        def probe(kind: str) -> None:
            server, client_box = pairs[kind]
            (settings,) = server.attrs["NetworkSettings"]["Networks"].values()
            results[kind] = _probe(client_box, settings["IPAddress"], seconds)

        probes = [threading.Thread(target=probe, args=(kind,)) for kind in pairs]
        churn.start()
        started = time.monotonic()
        for t in probes:
            t.start()
        for t in probes:
            t.join()
        stop.set()
        churn.join()
        return {"seconds": round(time.monotonic() - started, 1),
                "networks_created_and_removed": churned[0] if churned else 0,
                "plain_bridges_baseline": results["plain"],
                "tenant_bridges_guarded": results["guarded"],
                "guard_dropped_packets": _guard_drops() - drops_before}
    finally:
        for thing in made:
            thing.remove(**({"force": True} if hasattr(thing, "exec_run") else {}))


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 60), indent=2))

"""Container instances on a shared server's Docker engine (the container runtime port).

One container per instance, named `gpulease-<instance id>` and labelled with it, so a start
repeated after a worker crash finds the container it made, and a stop of what is gone is a
no-op. The tenant's GPUs are handed over as an NVIDIA device request (the engine needs the
NVIDIA container toolkit); SSH is the container's port 22 published on a free host port.

The image is the catalog image's container build (`<prefix><image id>`, or an operator's
mapping). It needs `/bin/sh`, OpenSSH's `sshd` and `chpasswd`: the runtime writes the
tenant's keys and the root password's hash into the container before starting it, then
runs sshd in the foreground as the container's main process.
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest

from gpulease.configdrive import hash_root_password
from gpulease.ports.runtime import ContainerHandle, ContainerSpec, RuntimeError_

LABEL = "io.gpulease.instance"
ENTRY = (
    "set -e; mkdir -p /run/sshd; "
    # Once: the hash is deleted after use, and a restarted container keeps its password.
    "if [ -f /etc/gpulease/root-password ]; then chpasswd -e < /etc/gpulease/root-password; "
    "rm -f /etc/gpulease/root-password; fi; "
    "ssh-keygen -A >/dev/null; "
    "exec /usr/sbin/sshd -D -e -o PasswordAuthentication=yes -o PermitRootLogin=yes"
)


def container_name(instance_id: str) -> str:
    return f"gpulease-{instance_id}"


def public_host(engine_url: str) -> str:
    """Where tenants reach a published port: the engine's host (127.0.0.1 for a local
    socket)."""
    host = urlsplit(engine_url).hostname
    return "127.0.0.1" if not host or engine_url.startswith("unix:") else host


def _fail(message: str, retryable: bool) -> RuntimeError_:
    err = RuntimeError_(message)
    err.retryable = retryable
    return err


class DockerRuntime:
    def __init__(self, image_for: Callable[[str], str], gpus: str = "nvidia",
                 timeout_s: float = 30.0, tls_dir: str = "") -> None:
        if gpus not in ("nvidia", "none"):
            raise ValueError(f"gpus must be 'nvidia' or 'none', not {gpus!r}")
        self._image_for, self._gpus, self._timeout = image_for, gpus, timeout_s
        self._tls_dir = tls_dir
        self._clients: dict[str, docker.DockerClient] = {}
        self._lock = threading.Lock()

    def _client(self, url: str) -> docker.DockerClient:
        with self._lock:
            client = self._clients.get(url)
            if client is None:
                tls: Any = False
                if self._tls_dir and url.startswith("tcp:"):
                    tls = docker.tls.TLSConfig(
                        client_cert=(f"{self._tls_dir}/cert.pem", f"{self._tls_dir}/key.pem"),
                        ca_cert=f"{self._tls_dir}/ca.pem", verify=True)
                client = docker.DockerClient(
                    base_url=url, timeout=int(self._timeout), tls=tls,
                    use_ssh_client=url.startswith("ssh:"))
                self._clients[url] = client
            return client

    def start(self, spec: ContainerSpec) -> ContainerHandle:
        if not spec.engine_url:
            raise _fail(f"node {spec.node_name} has no Docker engine URL", retryable=False)
        try:
            client = self._client(spec.engine_url)
            container = self._find(client, spec.instance_id)
            if container is None:
                container = self._create(client, spec)
            if container.status != "running":
                container.start()
            return ContainerHandle(container.id, public_host(spec.engine_url),
                                   self._ssh_port(container))
        except RuntimeError_:
            raise
        except ImageNotFound as exc:
            raise _fail(f"image {self._image_for(spec.image_id)!r} is not on "
                        f"{spec.node_name} ({exc.explanation}); load or pull it there",
                        retryable=False) from exc
        except DockerException as exc:  # engine unreachable, busy, a hiccup: try again
            raise _fail(f"Docker engine of {spec.node_name}: {exc}", retryable=True) from exc

    def stop(self, instance_id: str, node_name: str, engine_url: str | None = None) -> None:
        if not engine_url:
            raise _fail(f"node {node_name} has no Docker engine URL", retryable=False)
        try:
            container = self._find(self._client(engine_url), instance_id)
            if container is not None:
                container.remove(force=True)  # stop and remove; its writable layer goes too
        except NotFound:
            return  # removed meanwhile
        except DockerException as exc:
            raise _fail(f"Docker engine of {node_name}: {exc}", retryable=True) from exc

    def _find(self, client: docker.DockerClient, instance_id: str) -> Any:
        try:
            return client.containers.get(container_name(instance_id))
        except NotFound:
            return None

    def _create(self, client: docker.DockerClient, spec: ContainerSpec) -> Any:
        image = self._image_for(spec.image_id)
        gpus = ",".join(str(i) for i in spec.gpu_indices)
        requests = ([DeviceRequest(driver="nvidia", device_ids=[str(i) for i in spec.gpu_indices],
                                   capabilities=[["gpu"]])] if self._gpus == "nvidia" else [])
        try:
            container = client.containers.create(
                image, command=["/bin/sh", "-c", ENTRY], name=container_name(spec.instance_id),
                hostname=spec.instance_id, detach=True, ports={"22/tcp": None},
                labels={LABEL: spec.instance_id, "io.gpulease.gpus": gpus,
                        "io.gpulease.node": spec.node_name},
                device_requests=requests,
                # the stubs know only "always" and "on-failure"; the engine takes this too
                restart_policy={"Name": "unless-stopped"},  # type: ignore[arg-type]
                shm_size="8g" if self._gpus == "nvidia" else None)
        except APIError as exc:
            if exc.status_code == 409:  # another worker created it a moment ago
                found = self._find(client, spec.instance_id)
                if found is not None:
                    return found
            raise
        container.put_archive("/", _init_files(spec))
        return container

    def _ssh_port(self, container: Any) -> int:
        deadline = time.monotonic() + self._timeout
        while True:
            container.reload()
            bound = (container.attrs["NetworkSettings"]["Ports"] or {}).get("22/tcp")
            if bound:
                return int(bound[0]["HostPort"])
            if container.status == "exited" or time.monotonic() > deadline:
                logs = container.logs(tail=20).decode(errors="replace").strip()
                raise _fail(f"container {container.name} did not come up "
                            f"({container.status}): {logs or 'no output'}", retryable=True)
            time.sleep(0.1)


def _init_files(spec: ContainerSpec) -> bytes:
    """The tenant's keys and the root password's hash (bcrypt, hashed here: only when the
    container is created), as a tar for put_archive."""
    hashed = hash_root_password(spec.root_password) if spec.root_password else "*"
    files = {"root/.ssh/authorized_keys": ("\n".join(spec.ssh_keys) + "\n", 0o600),
             "etc/gpulease/root-password": (f"root:{hashed}\n", 0o600)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in ("root/.ssh", "etc/gpulease"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for path, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()

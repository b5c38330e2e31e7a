"""Container instances on a shared server's Docker engine (the container runtime port).

One container per instance, named `gpulease-<instance id>` and labelled with it, so a start
repeated after a worker crash finds the container it made, and a stop of what is gone is a
no-op. The tenant's GPUs are handed over as an NVIDIA device request (the engine needs the
NVIDIA container toolkit); SSH is the container's port 22 published on a free host port.

The image is the catalog image's container build (`<prefix><image id>`, or an operator's
mapping). It needs `/bin/sh`, OpenSSH's `sshd` and `chpasswd`: the runtime writes the
tenant's keys and the root password's hash into the container before starting it, then
runs sshd in the foreground as the container's main process.

Isolation (the tenant is root inside, a stranger to the provider and to the neighbours):
each tenant's containers get a bridge network of their own (`gpulease-tenant-<id>` on a
bridge `gl-<hash>`; the engine keeps bridges apart, and the host's guard
(drivers/bridge_guard.py) closes the moments when it does not), the offer's share of the
host as memory (no swap on top), CPU and pids limits, all capabilities dropped but what
sshd and a root shell need, no-new-privileges, no privileged mode, only the instance's
GPUs, a named volume at /data that is deleted with the instance, and no mount of the
engine's socket. sshd takes keys only unless the order asked for password login.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from gpulease.drivers.on_behalf import guard_session
from gpulease.ports.runtime import (
    ContainerHandle,
    ContainerSpec,
    RuntimeError_,
    SavedImageResult,
)

LABEL = "io.gpulease.instance"
TENANT_LABEL = "io.gpulease.tenant"
BRIDGE_OPTION = "com.docker.network.bridge.name"
DATA_MOUNT = "/data"
# What sshd and a root shell need of the engine's default set; the rest of it (MKNOD,
# NET_RAW: forged packets on the bridge, SETFCAP, SETPCAP) goes with everything else.
CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                "NET_BIND_SERVICE", "SYS_CHROOT", "AUDIT_WRITE")
KEYS_ONLY = ("-o PasswordAuthentication=no -o KbdInteractiveAuthentication=no "
             "-o PermitRootLogin=prohibit-password")
WITH_PASSWORD = "-o PasswordAuthentication=yes -o PermitRootLogin=yes"


def entry(password_login: bool) -> str:
    """The container's main process: set the root password once (the hash is deleted after
    use, and a restarted container keeps its password), then sshd in the foreground."""
    return ("set -e; mkdir -p /run/sshd; "
            "if [ -f /etc/gpulease/root-password ]; then "
            "chpasswd -e < /etc/gpulease/root-password; rm -f /etc/gpulease/root-password; fi; "
            "ssh-keygen -A >/dev/null; "
            f"exec /usr/sbin/sshd -D -e {WITH_PASSWORD if password_login else KEYS_ONLY}")


def container_name(instance_id: str) -> str:
    return f"gpulease-{instance_id}"


def network_name(tenant_id: str) -> str:
    return f"gpulease-tenant-{tenant_id}"


def bridge_name(tenant_id: str) -> str:
    """The tenant network's bridge on the host, `gl-` and 12 hex digits (an interface name
    holds 15 characters): the host's guard between tenants matches bridges by that prefix
    (gpulease/drivers/bridge_guard.py)."""
    return "gl-" + hashlib.sha256(tenant_id.encode()).hexdigest()[:12]


def volume_name(instance_id: str) -> str:
    return f"gpulease-{instance_id}-data"


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
        self._cpus: dict[str, int] = {}  # per engine: its CPU count (limits stop there)
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
                guard_session(client.api)  # changes go out only under a fresh claim
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
                container = self._start(client, spec, container)
            return ContainerHandle(container.id, public_host(spec.engine_url),
                                   self._ssh_port(container))
        except RuntimeError_:
            raise
        except ImageNotFound as exc:
            raise _fail(f"image {spec.image_ref or self._image_for(spec.image_id)!r} is not on "
                        f"{spec.node_name} ({exc.explanation}); load or pull it there",
                        retryable=False) from exc
        except DockerException as exc:  # engine unreachable, busy, a hiccup: try again
            raise _fail(f"Docker engine of {spec.node_name}: {exc}", retryable=True) from exc

    def stop(self, instance_id: str, node_name: str, engine_url: str | None = None) -> None:
        if not engine_url:
            raise _fail(f"node {node_name} has no Docker engine URL", retryable=False)
        try:
            client = self._client(engine_url)
            container = self._find(client, instance_id)
            tenant = container.labels.get(TENANT_LABEL) if container is not None else None
            if container is not None:
                container.remove(force=True)  # stop and remove; its writable layer goes too
            self._remove_volume(client, instance_id)
            if tenant:
                self._remove_network_if_unused(client, tenant)
        except NotFound:
            return  # removed meanwhile
        except DockerException as exc:
            raise _fail(f"Docker engine of {node_name}: {exc}", retryable=True) from exc

    def restart(self, instance_id: str, node_name: str, engine_url: str | None = None
                ) -> ContainerHandle:
        """`docker restart`: SIGTERM, ten seconds, SIGKILL, then started again as it was;
        the engine publishes SSH on a new host port (read back)."""
        if not engine_url:
            raise _fail(f"node {node_name} has no Docker engine URL", retryable=False)
        try:
            container = self._find(self._client(engine_url), instance_id)
            if container is None:
                raise _fail(f"the container of {instance_id} is not on {node_name}",
                            retryable=False)
            container.restart(timeout=10)
            return ContainerHandle(container_id=container.id, ip_address=public_host(engine_url),
                                   ssh_port=self._ssh_port(container))
        except RuntimeError_:
            raise
        except NotFound as exc:
            raise _fail(f"the container of {instance_id} is not on {node_name}",
                        retryable=False) from exc
        except DockerException as exc:
            raise _fail(f"Docker engine of {node_name}: {exc}", retryable=True) from exc

    def save(self, instance_id: str, node_name: str, engine_url: str | None,
             reference: str) -> SavedImageResult:
        """`docker commit` of the container (its writable layer over its image; /data is a
        volume and stays out), then a push to the registry the reference names."""
        if not engine_url:
            raise _fail(f"node {node_name} has no Docker engine URL", retryable=False)
        repository, _, tag = reference.rpartition(":")
        try:
            client = self._client(engine_url)
            container = self._find(client, instance_id)
            if container is None:
                raise _fail(f"no container of {instance_id} on {node_name}", retryable=False)
            image = container.commit(repository=repository, tag=tag,
                                     message=f"gpulease: saved from {instance_id}")
            digest = ""
            for line in client.api.push(repository, tag=tag, stream=True, decode=True):
                if line.get("error"):
                    raise _fail(f"the registry refused {reference}: {line['error']}",
                                retryable=False)
                digest = (line.get("aux") or {}).get("Digest", digest)
            if not digest:
                raise _fail(f"the push of {reference} named no digest", retryable=True)
            return SavedImageResult(reference, digest, int(image.attrs.get("Size") or 0))
        except RuntimeError_:
            raise
        except DockerException as exc:
            raise _fail(f"Docker engine of {node_name}: {exc}", retryable=True) from exc

    def _start(self, client: docker.DockerClient, spec: ContainerSpec, container: Any) -> Any:
        try:
            container.start()
            return container
        except APIError as exc:
            if "network" not in str(exc).lower():
                raise
        # Its tenant network went (the tenant's last other container was removed meanwhile):
        # it never ran, so nothing of the tenant's is lost by making it again.
        container.remove(force=True)
        container = self._create(client, spec)
        container.start()
        return container

    def _remove_volume(self, client: docker.DockerClient, instance_id: str) -> None:
        with contextlib.suppress(NotFound):
            client.volumes.get(volume_name(instance_id)).remove(force=True)

    def _remove_network_if_unused(self, client: docker.DockerClient, tenant_id: str) -> None:
        """The tenant's network goes with its last container on this host (a host's bridge
        subnets are few). One in use (a container started meanwhile) stays."""
        try:
            network = client.networks.get(network_name(tenant_id))
            if not network.attrs.get("Containers"):
                network.remove()
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code not in (403, 409):  # has active endpoints: still in use
                raise

    def _network(self, client: docker.DockerClient, tenant_id: str) -> str:
        name = network_name(tenant_id)
        try:
            client.networks.get(name)
        except NotFound:
            try:
                client.networks.create(name, driver="bridge", labels={TENANT_LABEL: tenant_id},
                                       options={BRIDGE_OPTION: bridge_name(tenant_id)})
            except APIError as exc:
                if exc.status_code != 409:  # made by another worker a moment ago
                    raise
        return name

    def _engine_cpus(self, client: docker.DockerClient, url: str) -> int:
        with self._lock:
            cpus = self._cpus.get(url)
        if cpus is None:
            cpus = int(client.info().get("NCPU") or 1)
            with self._lock:
                self._cpus[url] = cpus
        return cpus

    def _find(self, client: docker.DockerClient, instance_id: str) -> Any:
        try:
            return client.containers.get(container_name(instance_id))
        except NotFound:
            return None

    def _create(self, client: docker.DockerClient, spec: ContainerSpec) -> Any:
        image = spec.image_ref or self._image_for(spec.image_id)
        gpus = ",".join(str(i) for i in spec.gpu_indices)
        requests = ([DeviceRequest(driver="nvidia", device_ids=[str(i) for i in spec.gpu_indices],
                                   capabilities=[["gpu"]])] if self._gpus == "nvidia" else [])
        limits = spec.limits
        cpus = None
        if limits.cpus is not None:  # the engine refuses more CPUs than its host has
            cpus = min(limits.cpus, self._engine_cpus(client, spec.engine_url or ""))
        tenant = spec.tenant_id or "unknown"
        try:
            if spec.image_ref:
                _pull_unless_present(client, spec.image_ref)
            client.images.get(image)  # before anything else is made for the instance
            network = self._network(client, tenant)
            client.volumes.create(volume_name(spec.instance_id),
                                  labels={LABEL: spec.instance_id, TENANT_LABEL: tenant})
            container = client.containers.create(
                image, command=["/bin/sh", "-c", entry(spec.password_login)],
                name=container_name(spec.instance_id),
                hostname=spec.instance_id, detach=True, ports={"22/tcp": None},
                labels={LABEL: spec.instance_id, "io.gpulease.gpus": gpus,
                        "io.gpulease.node": spec.node_name, TENANT_LABEL: tenant},
                device_requests=requests,
                network=network,
                volumes={volume_name(spec.instance_id): {"bind": DATA_MOUNT, "mode": "rw"}},
                mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes,
                nano_cpus=int(cpus * 1e9) if cpus is not None else None,
                pids_limit=limits.pids,
                cap_drop=["ALL"], cap_add=list(CAPABILITIES),
                security_opt=["no-new-privileges:true"], privileged=False,
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


def _pull_unless_present(client: docker.DockerClient, reference: str) -> None:
    """A saved image comes from the platform's registry to a host that has not run it."""
    try:
        client.images.get(reference)
    except ImageNotFound:
        repository, _, tag = reference.rpartition(":")
        client.images.pull(repository, tag=tag)


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

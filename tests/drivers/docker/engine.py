"""The local Docker engine as the test peer of the container runtime, and the image the
tests run: Debian's minimal root filesystem with OpenSSH, built with debootstrap and
`docker import` (nothing can be pulled from a registry here). Built once per engine."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tempfile
import time

import docker
import pytest
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

ENGINE = "unix:///var/run/docker.sock"
IMAGE = "gpulease-test/sshd:bookworm"
MIRROR = os.environ.get("GPULEASE_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def engine_or_skip() -> docker.DockerClient:
    """The engine, or a skip locally; .ci/run starts dockerd and sets GPULEASE_REQUIRE_DOCKER,
    so CI fails instead of skipping."""
    try:
        client = docker.DockerClient(base_url=ENGINE, timeout=30)
        client.ping()
        return client
    except DockerException as exc:
        if os.environ.get("GPULEASE_REQUIRE_DOCKER"):
            pytest.fail(f"no Docker engine at {ENGINE} ({exc}); .ci/run starts dockerd")
        pytest.skip(f"no Docker engine at {ENGINE} (.ci/run installs and starts one)")


def ensure_test_image(client: docker.DockerClient) -> str:
    """The image, built by one test process while the others wait for it (a build takes
    about a minute; two at once would both pay it)."""
    with open(os.path.join(tempfile.gettempdir(), "gpulease-test-image.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        try:
            client.images.get(IMAGE)
            return IMAGE
        except ImageNotFound:
            return _build_test_image()


def _build_test_image() -> str:
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap is needed to build the test image (.ci/run installs it)")
    root = tempfile.mkdtemp(prefix="gpulease-rootfs-")
    try:
        subprocess.run(["debootstrap", "--variant=minbase", "--include=openssh-server",
                        "bookworm", root, MIRROR], check=True, capture_output=True, timeout=900)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", IMAGE], stdin=tar.stdout, check=True,
                       capture_output=True, timeout=300)
        tar.wait(60)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return IMAGE


def remove_node_containers(client: docker.DockerClient, node: str) -> None:
    """What a test left on the engine for one node: its containers, their data volumes and
    the tenant networks nothing uses any more. A release still running may be removing a
    container at the same moment: its volume goes once the container is gone."""
    label = {"label": f"io.gpulease.node={node}"}
    volumes = set()
    for c in client.containers.list(all=True, filters=label):
        volumes.add(f"gpulease-{c.labels['io.gpulease.instance']}-data")
        try:
            c.remove(force=True)
        except NotFound:  # the release removed it first
            pass
        except APIError as exc:  # or is removing it now
            if exc.status_code != 409:
                raise
    deadline = time.monotonic() + 30
    while client.containers.list(all=True, filters=label):  # bounded by the deadline
        assert time.monotonic() < deadline, f"containers of {node} still there after 30 s"
        time.sleep(0.2)
    for volume in volumes:
        with contextlib.suppress(NotFound):
            client.volumes.get(volume).remove(force=True)
    for network in client.networks.list(filters={"label": "io.gpulease.tenant"}, greedy=True):
        if not network.attrs.get("Containers"):
            try:
                network.remove()
            except NotFound:
                pass
            except APIError as exc:  # another test's container joined it meanwhile
                if exc.status_code not in (403, 409):
                    raise

"""What the Docker runtime asks the engine for, checked on a stand-in client: the parts
a test engine without GPUs cannot show (the NVIDIA device request names only the
instance's GPUs; CPUs stop at what the engine has). The real engine's side is in
tests/drivers/docker/test_isolation.py."""

from __future__ import annotations

from typing import Any

from docker.errors import NotFound

from gpulease.drivers.docker_runtime import DockerRuntime, network_name, volume_name
from gpulease.ports.runtime import ContainerLimits, ContainerSpec


class _Thing:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


class StandInEngine:
    def __init__(self) -> None:
        self.created: dict[str, Any] = {}
        self.networks = _Thing(get=self._no_network, create=lambda name, **kw: None)
        self.volumes = _Thing(create=lambda name, **kw: None)
        self.images = _Thing(get=lambda ref: ref)
        self.containers = _Thing(create=self._create)

    @staticmethod
    def _no_network(name: str) -> None:
        raise NotFound(name)

    def _create(self, image: str, **kw: Any) -> Any:
        self.created = {"image": image, **kw}
        return _Thing(put_archive=lambda path, data: True)

    def info(self) -> dict[str, int]:
        return {"NCPU": 12}


def test_the_container_asks_for_its_own_gpus_and_no_more_cpus_than_the_engine_has() -> None:
    engine = StandInEngine()
    runtime = DockerRuntime(lambda image: f"gpulease/{image}", gpus="nvidia")
    spec = ContainerSpec("i-1", "shared-1", (3, 4), "ubuntu", ("ssh-ed25519 AAAA k",),
                         "tcp://engine:2376", tenant_id="ten-a",
                         limits=ContainerLimits(cpus=32.0, memory_bytes=2**30, pids=8192))
    runtime._create(engine, spec)  # type: ignore[arg-type]
    made = engine.created
    (request,) = made["device_requests"]
    assert request["Driver"] == "nvidia" and request["DeviceIDs"] == ["3", "4"]
    assert made["nano_cpus"] == 12 * 10**9  # 32 asked, the engine has 12
    assert made["mem_limit"] == made["memswap_limit"] == 2**30 and made["pids_limit"] == 8192
    assert made["network"] == network_name("ten-a") and made["privileged"] is False
    assert made["volumes"] == {volume_name("i-1"): {"bind": "/data", "mode": "rw"}}
    assert "PasswordAuthentication=no" in made["command"][-1]

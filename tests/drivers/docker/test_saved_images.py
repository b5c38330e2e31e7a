"""A container instance saved as an image on a real Docker engine and pushed to a real
registry (Debian's docker-registry), then a later container of the same tenant started
from it on a host that no longer holds it (pulled back from the registry), with what was
installed in the first one; deleting it removes its manifest from the registry. SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import httpx
import pytest

from gpulease.drivers.docker_runtime import container_name
from gpulease.platform import Platform
from gpulease.services.instances import actions
from gpulease.services.instances import views as instances
from gpulease.services.storage import saved_images
from gpulease.testing.callers import new_tenant, ssh_key
from gpulease.worker.pipelines import image_saves
from gpulease.worker.pipelines.base import drive
from gpulease.worker.runner import Worker
from tests.drivers.docker.registry import running_registry
from tests.fixtures.docker import _order

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


def test_a_container_saved_as_an_image_starts_a_later_one_with_what_was_installed(
    docker_platform: Platform, engine: docker.DockerClient, registry: str
) -> None:
    p = docker_platform
    tenant, stranger = new_tenant(p), new_tenant(p)
    key = ssh_key()
    first = _order(p, tenant, key, gpus=1)
    worker = Worker(p, owner="docker-test")
    worker.run_until_idle()
    assert instances.show_instance(p, tenant.principal, first).status == "ready"
    from gpulease.domain.errors import Conflict

    with pytest.raises(Conflict, match="GPULEASE_REGISTRY"):
        saved_images.save(p, tenant.principal, first, "torch-env")
    p.settings.registry = registry
    box = engine.containers.get(container_name(first))
    assert box.exec_run(["sh", "-c", "echo installed-by-tenant > /opt/env.txt"]).exit_code == 0

    asked = saved_images.save(p, tenant.principal, first, "torch-env")
    assert asked.status == "saving" and asked.order_as == "my/torch-env"
    assert drive(p, image_saves.PIPELINE) == 1
    done = saved_images.list_saved(p, tenant.principal).items[0]
    assert done.status == "ready", done.status_reason
    assert done.digest and done.digest.startswith("sha256:") and done.size_bytes
    repos = httpx.get(f"http://{registry}/v2/_catalog", timeout=5).json()["repositories"]
    assert f"gpulease-saved/{tenant.tenant_id.lower()}/torch-env" in repos
    assert saved_images.list_saved(p, stranger.principal).items == []

    # the host forgets it: the next container pulls it back from the registry
    with p.db.read() as s:
        from gpulease.db.ops_tables import SavedImage

        row = s.get(SavedImage, done.id)
        assert row is not None
        reference = row.reference
    engine.images.remove(reference, force=True)
    second = _order(p, tenant, key, gpus=1, image="my/torch-env")
    worker.run_until_idle()
    view = instances.show_instance(p, tenant.principal, second)
    assert view.status == "ready", view.status_reason
    again = engine.containers.get(container_name(second))
    assert again.exec_run(["cat", "/opt/env.txt"]).output == b"installed-by-tenant\n"
    assert again.image.tags == [reference]

    saved_images.delete(p, tenant.principal, done.id)
    repository, _, tag = reference.partition("/")[2].rpartition(":")
    gone = httpx.get(f"http://{registry}/v2/{repository}/manifests/{tag}", timeout=5,
                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    assert gone.status_code == 404
    for iid in (first, second):
        actions.release_instance(p, tenant.principal, iid)
    worker.run_until_idle()
    engine.images.remove(reference, force=True)

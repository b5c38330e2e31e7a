"""The catalog job: a version another process published is swapped in at the job's next
run, never an older one; its interval is GPULEASE_CATALOG_FOLLOW_S."""

from __future__ import annotations

from pathlib import Path

from gpulease.compose import make_platform
from gpulease.platform import Platform
from gpulease.services.catalog import versions
from gpulease.testing.callers import TenantCtx
from gpulease.worker.jobs.catalog import follow


def test_a_version_published_elsewhere_is_followed(
    platform: Platform, operator: TenantCtx, tmp_path: Path
) -> None:
    other = make_platform(platform.settings.model_copy(update={"data_dir": tmp_path / "o"}))
    try:
        published = versions.publish(other, operator.principal)
    finally:
        other.close()
    assert platform.catalog_version != published.id
    assert follow.JOB.run(platform, "test") is True
    assert platform.catalog_version == published.id
    assert follow.JOB.run(platform, "test") is False  # nothing newer
    platform.settings.catalog_follow_s = 7.0
    assert follow.JOB.every_s(platform.settings) == 7.0

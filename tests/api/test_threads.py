"""GPULEASE_API_THREADS: how many requests an API process works on at once in its threads
(the rest wait their turn), set when the app starts; 16 by default."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gpulease.api.app import create_app
from gpulease.compose import make_platform
from gpulease.platform import Platform
from gpulease.settings import Settings
from gpulease.testing.platforms import make_settings


@pytest.mark.parametrize("threads", [3, Settings().api_threads])
def test_the_api_works_on_as_many_requests_at_once_as_it_is_given(
        platform: Platform, tmp_path: Path, threads: int) -> None:
    given = make_platform(make_settings(
        platform.settings.database_url, tmp_path / "given", api_threads=threads))
    app = create_app(given)
    seen: list[float] = []

    async def start_and_look() -> None:
        async with app.router.lifespan_context(app):
            seen.append(anyio.to_thread.current_default_thread_limiter().total_tokens)

    try:
        anyio.run(start_and_look)
    finally:
        given.db.dispose()
    assert seen == [threads]


def test_a_nonsense_thread_count_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="api_threads"):
        Settings(api_threads=0)

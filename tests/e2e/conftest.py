"""The end-to-end tests' `up`: the platform as the README starts it, in a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.up import Up, running_up


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    with running_up(tmp_path) as started:
        yield started

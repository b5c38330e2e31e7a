"""One builder of a cached artefact at a time: the second waits for the first (two test
processes once built the lab's OS image at once, the second over the first's file, and a
deploy then read back an image whose checksum was the other build's)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpulease.build_lock import building


def test_a_second_builder_waits_for_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "cache" / "image.lock"
    order: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with building(lock):
            first_in.set()
            time.sleep(0.3)
            order.append("first done")

    def second() -> None:
        first_in.wait(5)
        with building(lock):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert order == ["first done", "second in"]

"""One builder at a time for a cached artefact (an OS image, a deploy ramdisk) shared by
processes on one host: the second waits for the first, then finds its result in the cache
instead of building the same file again over it."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def building(lock_file: Path) -> Iterator[None]:
    """Held while this process builds what `lock_file` names (an exclusive flock, let go
    when the process ends, however it ends)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)

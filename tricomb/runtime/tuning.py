"""Progress of Triton's autotuner in emitted modules, shown by the CLI as a rich progress bar.

Each emitted module times its configs with ``_bench_config``, which first calls every reporter in its
``TUNING["reporters"]`` with (configs timed so far, configs in all). The loader points every module's list at
:data:`REPORTERS`, so one reporter sees the tuning of every kernel.
"""
from __future__ import annotations

import contextlib
import time

REPORTERS: list = []


class _Bar:
    """A reporter that draws a rich progress bar once tuning has run for ``after_s`` seconds."""

    def __init__(self, after_s: float):
        self.after_s = after_s
        self.started = None
        self.progress = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0 or self.started is None:
            self.started = now
        if self.progress is None and now - self.started >= self.after_s:
            from rich.progress import Progress
            self.progress = Progress(transient=True)
            self.progress.start()
            self.task = self.progress.add_task("Triton autotuner: timing configs", total=total)
        if self.progress is not None:
            self.progress.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


@contextlib.contextmanager
def progress_bar(after_s: float = 1.0):
    """Within the block, show a progress bar of the autotuner's configs when tuning takes over ``after_s``
    seconds (the first launch of a large pipeline on the GPU; a later process reads the choice from disk)."""
    bar = _Bar(after_s)
    REPORTERS.append(bar)
    try:
        yield
    finally:
        REPORTERS.remove(bar)
        bar.close()

"""A dictionary of bounded size that forgets its least recently used entry first."""
from __future__ import annotations

from collections import OrderedDict

_MISSING = object()


class LRU(OrderedDict):
    """At most ``limit`` entries; reading (``get``, ``[]``) or writing one makes it the most recently used.

    Used for what a process keeps in memory per pipeline and per module, so that a long-running process building
    many pipelines or layouts holds a bounded number of kernels. Not thread-safe by itself: its users hold
    :data:`tricomb.serial.SERIAL` while they write."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.move_to_end(key)
        return value

    def get(self, key, default=None):
        value = OrderedDict.get(self, key, _MISSING)
        if value is _MISSING:
            return default
        try:
            self.move_to_end(key)
        except KeyError:  # another thread evicted it meanwhile
            pass
        return value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)

"""The lock around what Triton and CPython keep process-wide, for every layer that builds or runs kernels."""
from __future__ import annotations

import threading

SERIAL = threading.RLock()
"""Held while tricomb builds or loads a kernel and while Triton's interpreter runs one (tricomb's kernels, and
the fixed kernel that the torch meaning of a pipeline runs a user ``@triton.jit`` function with). The
interpreter swaps ``triton.language``'s functions process-wide for the length of a launch,
``knobs.runtime.interpret`` is process-wide, and CPython 3.11's ``ast`` module checks its recursion depth in
state that threads share: two threads doing any of these at once broke each other (``tests/test_threads.py``)."""

"""Counting kernel launches, independently of tricomb's own bookkeeping.

Inside :func:`count_launches`, every Triton kernel run (compiled or interpreted) is counted by patching
Triton's own launch entry points, and every torch operation that computes (anything but allocation, views
and metadata) is counted by a ``TorchDispatchMode``. A fused pipeline shows ``triton == 1`` and
``torch_ops == []``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from torch.utils._python_dispatch import TorchDispatchMode


@dataclass
class LaunchCount:
    triton: int = 0
    torch_ops: list[str] = field(default_factory=list)
    _in_triton: int = 0

    @property
    def total(self) -> int:
        """Triton kernels plus torch operations that compute."""
        return self.triton + len(self.torch_ops)


_FREE = ("empty", "empty_strided", "empty_like", "lift_fresh", "detach", "alias", "_local_scalar_dense",
         "is_nonzero", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset")


class _TorchOps(TorchDispatchMode):
    def __init__(self, count: LaunchCount):
        super().__init__()
        self.count = count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        on_meta = any(getattr(a, "is_meta", False) for a in args)
        if not self.count._in_triton and not on_meta and not func.is_view and name not in _FREE:
            self.count.torch_ops.append(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def count_launches():
    """Count kernel launches in the block: ``with count_launches() as n: ...; n.triton, n.torch_ops``."""
    from triton.runtime.jit import JITFunction
    from triton.runtime.interpreter import InterpretedFunction
    count = LaunchCount()
    originals = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def counting(original):
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                count.triton += 1
            count._in_triton += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                count._in_triton -= 1
        return run

    for cls, original in originals.items():
        cls.run = counting(original)
    try:
        with _TorchOps(count):
            yield count
    finally:
        for cls, original in originals.items():
            cls.run = original

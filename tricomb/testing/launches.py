"""Counting kernel launches, independently of tricomb's own bookkeeping.

Inside :func:`count_launches`, every compiled Triton kernel launch is counted by Triton's launch hook (which
fires however the launch is made; while a hook is set, tricomb launches through Triton's own path), every
interpreted one by patching the interpreter's entry point, and every torch operation that computes (anything
but allocation, views and metadata) by a ``TorchDispatchMode``. A fused pipeline shows ``triton == 1`` and
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


def _counting(count: LaunchCount, original, counts: bool):
    """``original`` (a Triton ``run``), marking torch work inside it as Triton's, and counting it if ``counts``."""
    def run(self, *args, **kwargs):
        if counts and not kwargs.get("warmup", False):
            count.triton += 1
        count._in_triton += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            count._in_triton -= 1
    return run


@contextlib.contextmanager
def _launch_hook(hook):
    """Add ``hook`` to Triton's launch-enter hooks for the block (a chain of hooks, or one, by Triton version)."""
    import triton
    runtime = triton.knobs.runtime
    chain = runtime.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
        try:
            yield
        finally:
            chain.remove(hook)
        return
    runtime.launch_enter_hook = hook
    try:
        yield
    finally:
        runtime.launch_enter_hook = chain


@contextlib.contextmanager
def count_launches():
    """Count kernel launches in the block: ``with count_launches() as n: ...; n.triton, n.torch_ops``."""
    from triton.runtime.jit import JITFunction
    from triton.runtime.interpreter import InterpretedFunction
    count = LaunchCount()
    originals = {JITFunction: JITFunction.run, InterpretedFunction: InterpretedFunction.run}

    def launched(metadata):
        count.triton += 1

    JITFunction.run = _counting(count, originals[JITFunction], counts=False)
    InterpretedFunction.run = _counting(count, originals[InterpretedFunction], counts=True)
    try:
        with _launch_hook(launched), _TorchOps(count):
            yield count
    finally:
        for cls, original in originals.items():
            cls.run = original

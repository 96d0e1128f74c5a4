"""The call path: bind the inputs, find (or emit and load) the kernel module, launch it.

Each :class:`~tricomb.api.Pipeline` keeps its compiled entries keyed by :class:`~tricomb.lower.bind.Binding`,
so a repeated call with inputs of the same dtypes, ranks and layout re-emits and re-loads nothing.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from types import ModuleType

import numpy
import torch

from ..codegen.module import emit_module
from ..lower.bind import Binding, bind
from ..lower.fuse import KernelPlan, plan
from ..pipeline.ir import PipelineIR
from .loader import load_module

_OVERRIDES: contextvars.ContextVar[dict] = contextvars.ContextVar("tricomb_schedule_overrides", default={})


@dataclass(frozen=True)
class Compiled:
    """A plan, its emitted source, and the imported module (interpreted or compiled) that runs it."""

    plan: KernelPlan
    source: str
    module: ModuleType


@contextlib.contextmanager
def schedule_overrides(**overrides):
    """Within the block, every launch uses these schedule entries (``BLOCK``, ``BLOCK_M``, ``BLOCK_K``,
    ``SPLIT``, ``num_warps``) instead of the heuristics'. Tests use it to force tiny tiles and split rows."""
    token = _OVERRIDES.set({**_OVERRIDES.get(), **overrides})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def compile_for(pipeline: PipelineIR, cache: dict, tensors: tuple, out=None) -> tuple[Compiled, tuple]:
    """The compiled entry for ``tensors`` (emitting and loading it on first use) and the result's shape."""
    binding, shape = bind(pipeline, tensors, out)
    entry = cache.get(binding)
    if entry is None:
        kernel_plan = plan(pipeline, binding)
        source = emit_module(kernel_plan)
        entry = Compiled(kernel_plan, source, load_module(source, interpret=binding.device_type == "cpu"))
        cache[binding] = entry
    return entry, shape


def run(pipeline: PipelineIR, cache: dict, tensors: tuple, out: torch.Tensor | None) -> torch.Tensor:
    """Run the pipeline on ``tensors``: one kernel launch (none for an empty result)."""
    entry, _ = compile_for(pipeline, cache, tensors, out)
    if entry.plan.binding.device_type == "cpu":
        # masked-off lanes of the interpreter's numpy arrays compute log(0), 0/0, ...: nothing reads them
        with numpy.errstate(all="ignore"):
            return entry.module.launch(*tensors, out=out, _checked=True, **_OVERRIDES.get())
    return entry.module.launch(*tensors, out=out, _checked=True, **_OVERRIDES.get())


def emit_source(pipeline: PipelineIR, tensors: tuple) -> str:
    """The emitted module for inputs like ``tensors``, without loading it."""
    binding, _ = bind(pipeline, tensors)
    return emit_module(plan(pipeline, binding))


def make_plan(pipeline: PipelineIR, tensors: tuple) -> KernelPlan:
    binding, _ = bind(pipeline, tensors)
    return plan(pipeline, binding)


__all__ = ["Binding", "Compiled", "compile_for", "emit_source", "make_plan", "run", "schedule_overrides"]

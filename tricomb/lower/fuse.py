"""Fusion: a bound pipeline becomes one kernel plan.

Every pipeline becomes exactly one kernel of one of three kinds:

* ``map``: no reduce or scan; one flat index over the output.
* ``reduce``: ``M`` rows (the kept groups) by ``K`` reduced elements; the stages before the reduce run inside
  the loop over ``K``, the stages after it in the epilogue. When rows are few and long, programs split each row
  and the last program to finish a row (an atomic ticket) combines the partials in a fixed order.
* ``scan``: ``M`` rows by ``K`` scanned elements, tile by tile, carrying the running prefix; stages before the
  scan run on loaded tiles, stages after it on the scanned tile before the store.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..pipeline.ir import PipelineIR, Reduce, Scan, Stage
from ..pipeline.verify import operator_spec
from ..scalar.builtins import OpSpec
from .bind import Binding, Group, combine_stage


@dataclass(frozen=True, slots=True)
class Slot:
    """A tensor the kernel reads or writes: kernel parameter ``name``."""

    name: str
    dtype: torch.dtype
    after: bool  # read after the reduce/scan (or the output)


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """Everything the emitter needs to write the one kernel of a pipeline and its launcher."""

    kind: str  # "map" | "reduce" | "scan"
    pipeline: PipelineIR
    binding: Binding
    inputs: tuple[Slot, ...]
    output: Slot
    before: tuple[Stage, ...]  # stages applied before the reduce/scan (all of them for a map kernel)
    combine: Reduce | Scan | None
    after: tuple[Stage, ...]  # stages applied to the reduced or scanned values
    compute_dtype: torch.dtype  # dtype of elementwise math (half types computed in float32)
    acc_dtype: torch.dtype  # dtype of the reduce/scan accumulator

    @property
    def num_kernels(self) -> int:
        return 1

    @property
    def operator(self) -> OpSpec | None:
        return operator_spec(self.combine.op) if self.combine is not None else None

    @property
    def kept(self) -> tuple[Group, ...]:
        return tuple(g for g in self.binding.groups if g.kind == "kept")

    @property
    def reduced(self) -> tuple[Group, ...]:
        return tuple(g for g in self.binding.groups if g.kind == "reduced")

    @property
    def slots(self) -> tuple[Slot, ...]:
        return self.inputs + (self.output,)


def _compute_dtype(dtypes) -> torch.dtype:
    return torch.float64 if torch.float64 in dtypes else torch.float32


def plan(pipeline: PipelineIR, binding: Binding) -> KernelPlan:
    """The kernel plan for ``pipeline`` on inputs of ``binding``'s layout class."""
    at, stage = combine_stage(pipeline)
    inputs = tuple(Slot(f"in{i}", dtype, after) for i, (dtype, after)
                   in enumerate(zip(binding.dtypes, binding.joins_after)))
    output = Slot("out", binding.out_dtype, True)
    kind = "map" if stage is None else ("reduce" if isinstance(stage, Reduce) else "scan")
    compute = _compute_dtype(binding.dtypes)
    acc = compute
    if not binding.out_dtype.is_floating_point and binding.out_dtype != torch.bool:
        acc = torch.int64
    return KernelPlan(kind, pipeline, binding, inputs, output, pipeline.stages[:at], stage,
                      pipeline.stages[at + 1:], compute, acc)


def describe(p: KernelPlan) -> str:
    """A readable account of the plan (what ``pipe.explain(x)`` prints)."""
    from ..pipeline.printer import stage_text
    b = p.binding
    lines = [f"1 kernel: {p.kind}", f"  device: {b.device_type}"
             + (" (Triton interpreter)" if b.device_type == "cpu" else ""),
             "  inputs: " + ", ".join(f"{s.name} {str(s.dtype)[6:]} rank {r}" + (" (joins after)" if s.after else "")
                                      for s, r in zip(p.inputs, b.ranks)),
             f"  output: {str(p.output.dtype)[6:]}; compute in {str(p.compute_dtype)[6:]}",
             "  iteration groups (outer to inner): "
             + (", ".join(f"{g.kind}{list(g.dims)}" for g in b.groups) or "none (a single element)")]
    if p.before:
        lines.append("  per element: " + " | ".join(stage_text(s) for s in p.before))
    if p.combine is not None:
        lines.append(f"  {p.kind}: {stage_text(p.combine)} over axes {list(b.axes)}, accumulator "
                     f"{str(p.acc_dtype)[6:]}")
        if p.kind == "reduce":
            lines.append("  rows split across programs when few and long; the last program of a row combines "
                         "its partials in order")
    if p.after:
        lines.append("  after: " + " | ".join(stage_text(s) for s in p.after))
    return "\n".join(lines)

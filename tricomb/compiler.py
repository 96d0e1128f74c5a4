"""The compiler: the one ordered list of passes from a pipeline's stage IR to its emitted module.

Each pass is a pure function from a :class:`Unit` (what is known about one pipeline on inputs of one layout
class) to a new :class:`Unit` with one more thing known or one thing rewritten; nothing else lowers a pipeline.
Every caller (the call path, ``pipe.source``, ``pipe.explain``, the CLI) goes through :func:`compile_unit`.

The passes, in order (:data:`PASSES`):

* ``bind``: the inputs' layout class (:class:`~tricomb.lower.bind.Binding`: dtypes, ranks, dimension groups)
  and the result's shape; refuses inputs the pipeline cannot take, before anything runs;
* ``check_dtypes``: each reduce and scan operator's laws hold in the dtypes it combines (on the stages as
  written, before any rewrite);
* ``expand``: derived stages (mean, nanmean, nansum, argmax/argmin, cummax/cummin, ``dtype=``) become core
  stages and scalar functions, so no later pass knows their names;
* ``totalize``: an operator without an identity gets a validity flag, which makes it total;
* ``fuse``: the kernel plan, a sequence of segments;
* ``emit``: the Python source of the standalone kernel module.

Dumps: ``TRICOMB_DUMP=fuse,emit`` (pass names, comma-separated, or ``all``) writes the IR after each named pass
to standard error as it runs; ``pipe.explain(x, passes=True)`` shows the IR after every pass.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Callable

from .codegen.module import emit_module
from .codegen.strategies import describe
from .errors import ArgumentError
from .lower.bind import Binding, bind
from .lower.expand import expand
from .lower.fuse import KernelPlan, check_dtypes, plan
from .lower.totalize import totalize
from .pipeline.ir import PipelineIR
from .pipeline.printer import pipeline_text


@dataclass(frozen=True)
class Unit:
    """One pipeline on inputs of one layout class, as far as the passes so far have lowered it. ``pipeline`` is
    the pipeline as written; ``stages`` the pipeline as rewritten (``expand``, ``totalize``); ``tensors`` and
    ``out`` are the call's arguments, read for their layouts only."""

    pipeline: PipelineIR
    tensors: tuple
    out: object = None
    binding: Binding | None = None
    stages: PipelineIR | None = None
    plan: KernelPlan | None = None
    source: str | None = None
    done: tuple[str, ...] = ()  # the passes it has been through, in order


@dataclass(frozen=True)
class Pass:
    """A named pass: ``run`` lowers a unit one step; ``show`` writes what it produced, for dumps."""

    name: str
    run: Callable[[Unit], Unit]
    show: Callable[[Unit], str]


def _bind(unit: Unit) -> Unit:
    binding, _ = bind(unit.pipeline, unit.tensors, unit.out)
    return dataclasses.replace(unit, binding=binding, stages=unit.pipeline)


def _check_dtypes(unit: Unit) -> Unit:
    check_dtypes(unit.pipeline, unit.binding)
    return unit


def _rewrite(rule: Callable[[PipelineIR], PipelineIR]) -> Callable[[Unit], Unit]:
    def run(unit: Unit) -> Unit:
        return dataclasses.replace(unit, stages=rule(unit.stages))
    run.__name__ = rule.__name__
    return run


def _expand(unit: Unit) -> Unit:
    return dataclasses.replace(unit, stages=expand(unit.stages, unit.binding))


def _fuse(unit: Unit) -> Unit:
    return dataclasses.replace(unit, plan=plan(unit.stages, unit.pipeline, unit.binding))


def _emit(unit: Unit) -> Unit:
    return dataclasses.replace(unit, source=emit_module(unit.plan))


def _binding_text(unit: Unit) -> str:
    b = unit.binding
    dtypes = ", ".join(str(d)[6:] for d in b.dtypes)
    groups = ", ".join(f"{g.kind}{list(g.dims)}" for g in b.groups) or "none"
    return (f"device {b.device_type}; inputs ({dtypes}) of ranks {list(b.ranks)}; iteration rank {b.rank}, "
            f"axes {list(b.axes)}, groups {groups}; results ({', '.join(str(d)[6:] for d in b.out_dtypes)})")


def _stages_text(unit: Unit) -> str:
    return pipeline_text(unit.stages)


def _checked_text(unit: Unit) -> str:
    return f"{pipeline_text(unit.pipeline)}  (laws hold in the dtypes combined)"


PASSES: tuple[Pass, ...] = (
    Pass("bind", _bind, _binding_text),
    Pass("check_dtypes", _check_dtypes, _checked_text),
    Pass("expand", _expand, _stages_text),
    Pass("totalize", _rewrite(totalize), _stages_text),
    Pass("fuse", _fuse, lambda unit: describe(unit.plan)),
    Pass("emit", _emit, lambda unit: unit.source),
)
NAMES = tuple(p.name for p in PASSES)


def _dumped() -> frozenset[str]:
    """The passes ``TRICOMB_DUMP`` names (``all`` for every one); ArgumentError for a name that is no pass."""
    text = os.environ.get("TRICOMB_DUMP", "").strip()
    if not text:
        return frozenset()
    names = {n.strip() for n in text.split(",") if n.strip()}
    if "all" in names:
        return frozenset(NAMES)
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise ArgumentError(f"TRICOMB_DUMP names {', '.join(map(repr, unknown))}, which is no pass; the passes are "
                            f"{', '.join(NAMES)} (or all)")
    return frozenset(names)


def compile_unit(unit: Unit, until: str = "emit", record: list | None = None) -> Unit:
    """``unit`` lowered by every pass it has not yet been through, up to and including the pass ``until``.
    With ``record`` (a list), each pass run appends ``(name, text of its IR)``. Raises ArgumentError for an
    unknown ``until`` or ``TRICOMB_DUMP`` name, and the pipeline's own errors from the pass that finds them."""
    if until not in NAMES:
        raise ArgumentError(f"until={until!r} is no pass; the passes are {', '.join(NAMES)}")
    dumped = _dumped()
    for step in PASSES[len(unit.done):NAMES.index(until) + 1]:
        unit = dataclasses.replace(step.run(unit), done=unit.done + (step.name,))
        if step.name in dumped or record is not None:
            text = step.show(unit)
            if record is not None:
                record.append((step.name, text))
            if step.name in dumped:
                sys.stderr.write(f"=== tricomb: after {step.name} ===\n{text}\n")
    return unit


def lower(pipeline: PipelineIR, tensors: tuple, out=None, until: str = "emit",
          record: list | None = None) -> Unit:
    """``pipeline`` on inputs like ``tensors`` (and ``out``), lowered through the passes up to ``until``."""
    return compile_unit(Unit(pipeline, tuple(tensors), out), until, record)

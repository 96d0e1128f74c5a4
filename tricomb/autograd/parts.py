"""A pipeline cut where its gradient is taken: the elementwise stages before its fold, the fold, the stages after.

Each elementwise run of stages composes into one scalar :class:`~tricomb.scalar.ir.Function` (every stage's
function substituted into the next), which :func:`~tricomb.scalar.derivatives.pullback` then differentiates.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lower.bind import combine_stage
from ..pipeline.ir import Map, PipelineIR, Reduce, Scan, Stage, ZipWith, new_inputs
from ..scalar.derivatives import JIT_VJP
from ..scalar.inline import globals_key
from ..scalar.ir import Arg, Function, jit_functions, substitute


@dataclass(frozen=True)
class Parts:
    """``pipeline`` as ``before`` (maps and zip_withs reading the first ``early`` inputs), ``fold`` (its reduce
    or scan, or None) and ``after`` (maps and zip_withs over the fold's result and the last ``late`` inputs)."""

    pipeline: PipelineIR
    before: tuple[Stage, ...]
    fold: Reduce | Scan | None
    after: tuple[Stage, ...]
    early: int
    late: int

    @property
    def through_fold(self) -> PipelineIR:
        """The stages up to and including the fold: what computes the fold's result."""
        return PipelineIR(self.before + (self.fold,))

    def before_function(self) -> Function:
        """The stages before the fold as one function of the early inputs (the identity of input 0 when there
        are none)."""
        return compose(self.before, 0, self.early)

    @property
    def width(self) -> int:
        """The number of fields of the fold's result (an index scan's positions counted)."""
        fold = self.fold
        if isinstance(fold, Reduce) and fold.index:
            return 1
        return len(fold.op.outputs) + (1 if isinstance(fold, Scan) and fold.index else 0)

    def after_function(self) -> Function:
        """The stages after the fold as one function of the fold's result fields, then the late inputs."""
        return compose(self.after, self.width, self.late)


def parts(pipeline: PipelineIR) -> Parts:
    """``pipeline`` cut at its first reduce or scan (:func:`~tricomb.lower.bind.combine_stage`)."""
    at, fold = combine_stage(pipeline)
    counts = new_inputs(pipeline.stages)
    early = sum(counts[:at + 1]) if fold is not None else sum(counts)
    return Parts(pipeline, pipeline.stages[:at], fold, pipeline.stages[at + 1:], early, sum(counts) - early)


def compose(stages: tuple[Stage, ...], width: int, inputs: int) -> Function:
    """Maps and zip_withs ``stages`` as one function of a stream of ``width`` fields followed by ``inputs``
    pipeline inputs (``width`` 0: the stages start the pipeline)."""
    stream = [Arg(i) for i in range(width)]
    pending = [Arg(width + j) for j in range(inputs)]
    for stage in stages:
        if not isinstance(stage, (Map, ZipWith)):
            raise TypeError(f"compose takes maps and zip_withs, not {type(stage).__name__}")
        take = new_inputs((stage,))[0] if not stream else max(stage.fn.arity - len(stream), 0)
        args, pending = stream + pending[:take], pending[take:]
        stream = substitute(stage.fn, args)
    if not stream:
        stream = pending[:1]
    names = "_".join(s.fn.name.strip("<>") for s in stages) or "identity"
    return Function(width + inputs, tuple(stream), names, stages[0].location if stages else None)


def jit_key(pipeline: PipelineIR) -> tuple:
    """What a derivation from ``pipeline``'s IR depends on beyond it: the names of its functions (which IR
    equality leaves out but derived kernels show), what its ``@triton.jit`` functions read from their globals now
    (their bodies are read as builtins) and the rules given for them with ``tc.vjp``; a cache of derivations
    keys on it beside the IR."""
    refs = list(dict.fromkeys(ref for fn in pipeline.functions for ref in jit_functions(fn)))
    return (tuple(fn.name for fn in pipeline.functions), globals_key(refs),
            tuple(JIT_VJP.get(ref) for ref in refs))

"""``tricomb check``: a pipeline checked against torch on inputs hypothesis draws.

Each example draws one shape of ``rank`` sides (0 to ``max_side``), the inputs read before the pipeline's reduce
or scan of that shape and those joining after it of the reduced shape, with values that include NaN, infinities
and signed zeros. tricomb's result must equal the float64 torch oracle's within its tolerance
(:func:`tricomb.testing.assert_matches_torch`); where torch refuses an input, tricomb must raise a
:class:`~tricomb.errors.TricombError`. On a mismatch hypothesis shrinks the example, and the smallest failing
input is reported, with its values, or by shapes and dtypes alone when the same shapes filled with 0 and filled
with 1 fail too.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch


@dataclass
class Outcome:
    """What ``check`` found: how many examples ran before the first failure (all of them when none failed), how
    many further runs shrinking took, and the smallest failing example (inputs, message) if any. ``raised``: the
    failure is an exception (tricomb's or the oracle's), not a result that differs; ``value_independent``: the
    failing inputs' shapes fail filled with 0 and filled with 1 too (the values seem not to matter)."""

    examples: int = 0
    shrinking: int = 0
    failing: list[torch.Tensor] | None = None
    message: str = ""
    raised: bool = False
    value_independent: bool = False
    refusals: int = 0


def _agrees(pipe, inputs: list[torch.Tensor], outcome: Outcome) -> None:
    """tricomb and torch agree on ``inputs``; raises AssertionError saying how they differ."""
    from ..errors import TricombError
    from ..pipeline.evaluate import evaluate
    from ..testing import assert_matches_torch
    try:
        evaluate(pipe.ir, [t.cpu() for t in inputs])
    except (RuntimeError, TypeError, ValueError, IndexError, OverflowError) as refused:
        try:
            pipe(*inputs)
        except TricombError:
            outcome.refusals += 1
            return
        raise AssertionError(f"torch refuses these inputs ({refused}) but tricomb returned a result") from None
    assert_matches_torch(pipe, *inputs)


def check(pipe, input_shapes, dtype: torch.dtype, device: torch.device, rank: int, max_side: int,
          examples: int, seed: int) -> Outcome:
    """Check ``pipe`` on ``examples`` drawn examples; ``input_shapes(shape)`` gives each input's shape for an
    iteration shape. Returns the :class:`Outcome` (hypothesis's own errors, such as a health check, propagate)."""
    from hypothesis import HealthCheck, Phase, given, seed as fixed_seed, settings, strategies as st
    from ..testing.strategies import tensors
    outcome = Outcome()

    @fixed_seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, print_blob=False, phases=tuple(Phase),
              derandomize=False, report_multiple_bugs=False, suppress_health_check=list(HealthCheck))
    # (each setting that decides what is drawn and shrunk is given: none comes from a profile a caller loaded)
    @given(st.data())
    def example(data):
        shape = tuple(data.draw(st.lists(st.integers(0, max_side), min_size=rank, max_size=rank), label="shape"))
        inputs = [data.draw(tensors(s, dtype), label=f"input {i}").to(device)
                  for i, s in enumerate(input_shapes(shape))]
        if outcome.failing is None:
            outcome.examples += 1
        else:
            outcome.shrinking += 1
        try:
            _agrees(pipe, inputs, outcome)
        except AssertionError as exc:
            outcome.failing, outcome.message, outcome.raised = inputs, str(exc), False  # the last one: the shrunk one
            raise
        except Exception as exc:  # the pipeline or the oracle failed outright: that is a finding too
            outcome.failing, outcome.message = inputs, f"{type(exc).__name__}: {exc}"
            outcome.raised = True
            raise

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, from the interpreter's masked-off lanes
            example()
    except Exception:  # hypothesis re-raises the shrunk example's error, recorded above
        if outcome.failing is None:
            raise
        outcome.value_independent = all(_fails(pipe, [torch.full_like(t, fill) for t in outcome.failing])
                                        for fill in (0, 1))
    return outcome


def _fails(pipe, inputs: list[torch.Tensor]) -> bool:
    """Whether ``inputs`` fail the check too (an exception of any kind counts as failing)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            _agrees(pipe, inputs, Outcome())
    except Exception:
        return True
    return False

"""Comparing a pipeline's result with the torch oracle (:mod:`tricomb.testing.reference`).

Tolerances follow the error analysis of the computation rather than one fixed number: each element may differ
by a few units of the output dtype's precision relative to its value, plus the compute dtype's precision times
the element's error scale (the largest magnitude on its way) times a factor that grows with the number of
elements combined into it (sqrt(n), the usual statistical bound for blocked summation; N. J. Higham,
"The accuracy of floating point summation", SIAM J. Sci. Comput. 14(4), 1993). NaN must match NaN exactly;
infinities must match, except that a result may overflow to infinity where the exact value lies within a factor
of two of the output dtype's largest finite number. Elements the oracle marks order dependent (a partial sum or
product could leave the compute dtype's range, so the grouping decides the value) are not compared.
"""
from __future__ import annotations

import math

import torch

from .reference import Reference, reference


def tolerance(ref: Reference, compute: torch.dtype) -> torch.Tensor:
    """The allowed absolute error for each element of ``ref``."""
    out = ref.dtype if ref.dtype.is_floating_point else torch.float64
    eps_out = torch.finfo(out).eps
    eps_compute = torch.finfo(compute).eps
    growth = 16.0 + 4.0 * math.sqrt(ref.length)
    return 4 * eps_out * ref.value.abs().nan_to_num(0.0, 0.0, 0.0) + eps_compute * growth * ref.scale \
        + torch.finfo(out).tiny


def mismatches(result: torch.Tensor, ref: Reference, compute: torch.dtype) -> torch.Tensor:
    """A bool tensor: True where ``result`` is not close enough to ``ref``."""
    got = result.detach().cpu().to(torch.float64)
    want = ref.value
    if not ref.dtype.is_floating_point:
        return got != want
    nan_ok = torch.isnan(got) == torch.isnan(want)
    both_nan = torch.isnan(got) & torch.isnan(want)
    close = (got - want).abs() <= tolerance(ref, compute)
    same_inf = torch.isinf(got) & torch.isinf(want) & (torch.sign(got) == torch.sign(want))
    big = torch.finfo(ref.dtype).max / 2
    overflow = torch.isinf(got) & (want.abs() >= big) & (torch.sign(got) == torch.sign(want))
    rounds_to_inf = torch.isinf(want) & (got.abs() >= big) & (torch.sign(got) == torch.sign(want))
    agrees = both_nan | (nan_ok & (close | same_inf | overflow | rounds_to_inf))
    if ref.order_dependent is not None:
        agrees = agrees | ref.order_dependent
    return ~agrees


def _layout(shape, stride) -> tuple[int, ...]:
    """Strides of the dimensions longer than 1 (a size-1 dimension's stride is arbitrary)."""
    return tuple(s for n, s in zip(shape, stride) if n > 1)


def _check_field(pipe, got: torch.Tensor, ref: Reference, field, compute: torch.dtype, name: str,
                 check_layout: bool) -> None:
    if got.dtype != ref.dtype:
        raise AssertionError(f"{pipe}: {name}dtype {got.dtype}, torch gives {ref.dtype}")
    if tuple(got.shape) != tuple(ref.value.shape):
        raise AssertionError(f"{pipe}: {name}shape {tuple(got.shape)}, torch gives {tuple(ref.value.shape)}")
    if check_layout and got.numel() > 1 and _layout(got.shape, got.stride()) != _layout(field.shape, field.stride):
        raise AssertionError(f"{pipe}: {name}strides {got.stride()}, torch lays it out as {field.stride}")
    bad = mismatches(got, ref, compute)
    if bool(bad.any()):
        where = bad.nonzero()[:5].tolist()
        values = got.detach().cpu().to(torch.float64)
        detail = "; ".join(f"at {tuple(i)}: got {values[tuple(i)].item()!r}, torch {ref.value[tuple(i)].item()!r}, "
                           f"tolerance {tolerance(ref, compute)[tuple(i)].item():.3g}" for i in where)
        raise AssertionError(f"{pipe}: {name}{int(bad.sum())} of {bad.numel()} elements differ from torch: {detail}")


def assert_matches_torch(pipe, *inputs: torch.Tensor, result=None, check_layout: bool = True):
    """Run ``pipe`` (unless ``result`` is given) and check it against the torch oracle: dtype, shape, layout
    (strides, as torch's result has them; pass ``check_layout=False`` for a result written into ``out=``) and
    values, of each field for a tuple result.

    Raises AssertionError naming the first mismatching elements. Returns the result.
    """
    from ..lower.bind import bind
    if result is None:
        result = pipe(*inputs)
    refs = reference(pipe, *inputs)
    ir, tensors = pipe._for_inputs(inputs) if hasattr(pipe, "_for_inputs") else (pipe.ir, inputs)
    _, fields = bind(ir, tensors)
    compute = (refs if isinstance(refs, tuple) else (refs,))[0].compute  # the least precise compute dtype used
    if len(fields) == 1:
        _check_field(pipe, result, refs, fields[0], compute, "", check_layout)
        return result
    if not isinstance(result, tuple) or len(result) != len(fields):
        raise AssertionError(f"{pipe}: expected a {len(fields)}-tuple of tensors, got {type(result).__name__}")
    for k, (got, ref, field) in enumerate(zip(result, refs, fields)):
        _check_field(pipe, got, ref, field, compute, f"field {k}: ", check_layout)
    return result

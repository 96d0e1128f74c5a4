"""Reduce and scan operators that are not builtins: their laws, checked on samples, and their meaning in torch.

A user operator is a scalar function of two arguments (a Python lambda or def over builtins, or a
``@triton.jit`` function) with an ``identity=``. Before any plan uses it, :func:`check_laws` evaluates it with
torch on a seeded random sample of floats and of small integers: an operator that is clearly not associative is
refused (a kernel combines in a tree, so the order of combination is not the sequential one), and whether it
commutes decides whether a reduce may combine lanes out of order. Float rounding alone never trips the check:
results are compared with a tolerance of 1e-6 relative to their size, in float64.

The torch meaning of a reduce or scan with a user operator is the sequential fold, in the combined dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LawError
from ..scalar.dtypes import typed_identity
from ..scalar.ir import Function

_SAMPLE = 64
_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Laws:
    """What the sample showed: associativity holds (else :func:`check_laws` raises), and whether it commutes."""

    associative: bool
    commutative: bool


def _apply(fn: Function, a, b) -> torch.Tensor:
    from .evaluate import evaluate_function
    try:
        return evaluate_function(fn, [a, b])[0]
    except (RuntimeError, TypeError) as exc:
        raise LawError(f"operator {fn.name!r} cannot be evaluated by torch on ({a.dtype}, {b.dtype}) values: {exc}. "
                       "(Builtins of two values such as tc.minimum take no Python numbers: write "
                       "tc.where(x < 10.0, x, 10.0))", fn.location) from None


def _differ(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Where two results differ beyond float rounding (NaN equal to NaN; exact for integers)."""
    if not (x.is_floating_point() or y.is_floating_point()):
        return x != y
    x, y = x.double(), y.double()
    both_nan = torch.isnan(x) & torch.isnan(y)
    scale = torch.maximum(x.abs(), y.abs()).nan_to_num(0.0, 0.0, 0.0).clamp_min(1.0)
    same = (x == y) | ((x - y).abs() <= _TOLERANCE * scale)
    return ~(same | both_nan)


def _samples() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Floats near 0 and of magnitudes up to 1e3 (a saturating operator shows itself only past its threshold),
    and small integers."""
    gen = torch.Generator().manual_seed(20261129)
    scale = torch.tensor([2.0, 30.0, 1000.0], dtype=torch.float64).repeat_interleave(_SAMPLE // 2)
    floats = [(torch.rand(scale.numel(), generator=gen, dtype=torch.float64) * 2 - 1) * scale for _ in range(3)]
    ints = [torch.randint(-5, 6, (_SAMPLE,), generator=gen) for _ in range(3)]
    return [tuple(floats), tuple(ints)]


def check_laws(op, identity=None, name: str | None = None, location=None) -> Laws:
    """Check a binary operator's associativity (and find its commutativity) on a seeded sample; with
    ``identity``, check that ``identity op x == x == x op identity`` too.

    ``op`` is anything ``reduce`` accepts as an operator. Raises :class:`LawError` when ``(a op b) op c`` and
    ``a op (b op c)`` differ on the sample, naming a counterexample (the message points at the tuple, linear
    recurrence, form for the common case ``alpha * a + b``), or when ``identity`` is not one.
    """
    from ..scalar.trace import to_function
    fn = op if isinstance(op, Function) else to_function(op, role="the operator", location=location)
    commutative = True
    for a, b, c in _samples():
        left = _apply(fn, _apply(fn, a, b), c)
        right = _apply(fn, a, _apply(fn, b, c))
        bad = _differ(left, right)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise LawError(
                f"operator {name or fn.name!r} is not associative: with a={a[i].item():.6g}, b={b[i].item():.6g}, "
                f"c={c[i].item():.6g}, (a op b) op c = {left[i].item():.6g} but a op (b op c) = "
                f"{right[i].item():.6g}. A reduce or scan combines in a tree, so its operator must be associative. "
                "A linear recurrence h = alpha * h + x is associative as an operator on pairs (value, decay): "
                "(v1, d1), (v2, d2) -> (v1 * d2 + v2, d1 * d2)", location)
        commutative = commutative and not bool(_differ(_apply(fn, a, b), _apply(fn, b, a)).any())
        integral = isinstance(identity, bool) or (isinstance(identity, (int, float)) and
                                                  (abs(identity) == float("inf") or float(identity).is_integer()))
        if identity is not None and (a.is_floating_point() or integral):
            _check_identity(fn, identity, a, name, location)
    return Laws(True, commutative)


def _check_identity(fn: Function, identity, a: torch.Tensor, name, location) -> None:
    """``e op x == x op e == x`` on the sample, and ``e op e == e`` (lanes past the end of a tile hold e)."""
    e = torch.full_like(a, typed_identity(identity, a.dtype))
    if bool(_differ(_apply(fn, e, e), e).any()):
        raise LawError(f"identity={identity!r} op identity is {_apply(fn, e, e)[0].item()!r}, not the identity, for "
                       f"operator {name or fn.name!r}; masked lanes combine the identity with itself, so the "
                       "operator must give it back (guard the formula with tc.where)", location)
    for left, right in ((e, a), (a, e)):
        got = _apply(fn, left, right)
        bad = _differ(got, a)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise LawError(f"identity={identity!r} is not an identity of operator {name or fn.name!r}: with "
                           f"x={a[i].item():.6g}, {'e op x' if left is e else 'x op e'} = {got[i].item():.6g}, "
                           "not x. Give the value e with e op x == x op e == x (0 for a sum, 1 for a product, "
                           "-inf for a maximum); an operator without one is not supported yet", location)


def fold_reduce(fn: Function, identity, x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """The sequential fold of ``fn`` over ``dims`` of ``x`` (in row-major order), starting from ``identity``."""
    kept = [d for d in range(x.dim()) if d not in dims]
    rows = x.permute(*kept, *dims).reshape(*(x.shape[d] for d in kept), -1)
    acc = torch.full(rows.shape[:-1], identity, dtype=x.dtype, device=x.device)
    if x.device.type == "meta":
        return _apply(fn, acc, acc)
    for k in range(rows.shape[-1]):
        acc = _apply(fn, acc, rows[..., k])
    return acc


def fold_scan(fn: Function, x: torch.Tensor, axis: int) -> torch.Tensor:
    """The inclusive sequential scan of ``fn`` along ``axis`` of ``x``."""
    if x.device.type == "meta" or x.shape[axis] == 0:
        return _apply(fn, x, x)
    outs = [x.select(axis, 0)]
    for k in range(1, x.shape[axis]):
        outs.append(_apply(fn, outs[-1], x.select(axis, k)))
    return torch.stack(outs, axis)

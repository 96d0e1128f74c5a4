"""The online normalizer of softmax: a row's largest element and the sum of ``exp(x - max)`` in one fold.

Its operator on ``(max, sum)`` pairs is declared associative and commutative (:func:`~.operators.declare_laws`),
with the share by which a tile folds as its largest element and then one ``exp`` per element
(:func:`~.operators.declare_share`). ``tc.library`` builds ``logsumexp`` and ``softmax_denominators`` from these,
and the planner derives the one-pass form of a two-pass softmax with them (:mod:`tricomb.lower.derive`), so they
live here, below both.
"""
from __future__ import annotations

import dataclasses
import inspect

from ..scalar.trace import BUILTINS, to_function
from .operators import Laws, declare_laws, declare_share

exp, abs_, where, maximum = (BUILTINS[n] for n in ("exp", "abs", "where", "maximum"))
_INF = float("inf")
_NAN = float("nan")
IDENTITY = (-_INF, 0.0)


def _log_sum_exp(m1, s1, m2, s2):
    m = maximum(m1, m2)
    return m, where(m1 == m, s1, s1 * exp(m1 - m)) + where(m2 == m, s2, s2 * exp(m2 - m))


def _log_sum_exp_lift(x):
    return x * 1.0, where(x == x, 1.0, x * 1.0)  # (x, 1), and (NaN, NaN) for NaN


def _log_sum_exp_share(m, x):
    # field 1 of (m, 0) combined with (x, 1) for x <= m: exp(x - m), and 1 where x == m (infinities included)
    return where(x == m, 1.0, exp(x - m))


def denominators(m, s):
    # a row holding +inf, or only -inf, sums exp(inf - inf), NaN in torch's sum: its s is NaN; an empty row keeps 0
    return m, where(abs_(m) == _INF, where(s == 0.0, s, _NAN), s)


def as_lambda(fn, role: str):
    """``fn`` traced to a Function printed as a lambda (so ``str(pipe)`` of a pipeline using it parses back)."""
    return dataclasses.replace(to_function(fn, role=role), name="<lambda>")


LOG_SUM_EXP = as_lambda(_log_sum_exp, "the log-sum-exp operator")
# (max, sum of exp(x - max)): exp(a - m) * exp(m - M) = exp(a - M), so rescaling to the larger max is exact
# algebra; associative and commutative (Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018)
declare_laws(LOG_SUM_EXP, IDENTITY, Laws(True, True))
# field 0 is the larger max; at equal maxima the sums add; (m, 0) combined with (x, 1) for x <= m has sum
# exp(x - m), 1 where x == m: tiles fold as their max, then the sum of the shares
LIFT = as_lambda(_log_sum_exp_lift, "the log-sum-exp lift")
SHARE = as_lambda(_log_sum_exp_share, "the log-sum-exp share")
declare_share(LIFT, LOG_SUM_EXP, IDENTITY, SHARE)
SOFTMAX_DENOMINATORS = as_lambda(denominators, "softmax_denominators' last map")


def taking(fn, n: int):
    """``fn``, which takes ``*fields``, shown to the tracer as a function of ``n`` positional parameters."""
    fn.__signature__ = inspect.Signature([inspect.Parameter(f"f{i}", inspect.Parameter.POSITIONAL_ONLY)
                                          for i in range(n)])
    return fn

# field-by-field sums of pairs and triples: sums, as torch.sum's (cross_entropy's loss and count, the norms'
# backward row sums), their laws declared rather than sampled
SUM_PAIRS = as_lambda(lambda a, h, b, k: (a + b, h + k), "the sum of pairs")
SUM_TRIPLES = as_lambda(lambda a1, b1, c1, a2, b2, c2: (a1 + a2, b1 + b2, c1 + c2), "the sum of triples")
declare_laws(SUM_PAIRS, (0.0, 0.0), Laws(True, True))
declare_laws(SUM_TRIPLES, (0.0, 0.0, 0.0), Laws(True, True))

"""Named pipelines built only from combinators: ``tc.library.var(axis=-1)`` is a map, a reduce on triples and a
map, compiled to one kernel like any pipeline the user writes.

Their operators are proven associative (each docstring gives the source) and registered with their laws
(:func:`tricomb.pipeline.operators.declare_laws`) instead of being sampled: the law check samples all reals,
while a Welford merge is associative only for counts that are not negative.
"""
from __future__ import annotations

import functools
import inspect
import numbers

import torch

from . import api
from . import library_backward as backward
from .errors import ArgumentError, caller_location
from .pipeline import online
from .pipeline.operators import Laws, declare_laws
from .scalar.trace import BUILTINS

def _arguments_named(fn):
    """A library function whose wrong arguments (torch's ``dim``, a missing or extra one) raise ArgumentError at
    the caller's line, rather than Python's bare TypeError."""
    signature = inspect.signature(fn)
    params = list(signature.parameters)

    @functools.wraps(fn)
    def pipeline(*args, **kwargs):
        extra = [k for k in kwargs if k not in params]
        if extra:
            raise ArgumentError(f"tc.library.{fn.__name__} takes {', '.join(params)}, not "
                                f"{', '.join(k + '=' for k in extra)}" +
                                (" (torch's dim is axis here)" if "dim" in extra else "") +
                                (" (torch's normalized_shape is axis here: -1, or (-2, -1) for the last two)"
                                 if "normalized_shape" in extra else ""), caller_location())
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentError(f"tc.library.{fn.__name__} takes {', '.join(params)}: {exc}", caller_location()) from None
        return fn(*args, **kwargs)
    return pipeline


__all__ = ["linear_recurrence", "ema", "softmax_denominators", "logsumexp", "softmax", "log_softmax", "layer_norm",
           "rms_norm", "cross_entropy", "var", "std", "norm", "adamw_step"]

exp, log, sqrt, rsqrt, abs_, where = (BUILTINS[n] for n in ("exp", "log", "sqrt", "rsqrt", "abs", "where"))
_INF = float("inf")
_NAN = float("nan")
# A constant field is written where(x == x, c, x): c in x's dtype and shape, and NaN where x is NaN (x * 0.0 + c
# would also be NaN for an infinite x).


def _linear(v1, d1, v2, d2):
    return v1 * d2 + v2, d1 * d2


def _welford(n1, mean1, m2_1, n2, mean2, m2_2):
    n = n1 + n2
    share = where(n == 0, 0.0, n2 / where(n == 0, 1.0, n))
    delta = mean2 - mean1
    # delta * (delta * (n1 * share)), not delta * delta * ...: n1 * share = n1 * n2 / n is at most min(n1, n2), so
    # the product overflows only where the result does, and is 0, not inf * 0, when either side is empty
    return n, mean1 + delta * share, m2_1 + m2_2 + delta * (delta * (n1 * share))


LINEAR = online.as_lambda(_linear, "the linear recurrence operator")
WELFORD = online.as_lambda(_welford, "the Welford merge")
# (v, d) pairs compose affine maps h -> d * h + v: associative, not commutative (Blelloch 1990, section 1.4)
declare_laws(LINEAR, (0.0, 1.0), Laws(True, False))
# Chan, Golub and LeVeque, "Algorithms for computing the sample variance", 1983: the pairwise merge of
# (count, mean, sum of squared deviations) is associative and commutative for non-negative counts
declare_laws(WELFORD, (0.0, 0.0, 0.0), Laws(True, True))


@_arguments_named
def linear_recurrence(axis: int = -1, reverse: bool = False) -> api.Pipeline:
    """``h[t] = d[t] * h[t-1] + v[t]`` along ``axis`` with ``h[-1] = 0`` (from the end with ``reverse``): a
    pipeline of two inputs ``(v, d)`` of broadcastable shapes, returning ``(h, running product of d)``, each of
    their broadcast shape and promoted dtype. A scan of (value, decay) pairs."""
    return api.zip_with(lambda v, d: (v, d)) >> api.scan(LINEAR, axis=axis, reverse=reverse, identity=(0.0, 1.0))


@_arguments_named
def ema(alpha: float, axis: int = -1) -> api.Pipeline:
    """The exponential moving average ``y[t] = alpha * x[t] + (1 - alpha) * y[t-1]`` with ``y[-1] = 0``, along
    ``axis`` of one input; the result has its shape and (float) dtype. Raises :class:`~tricomb.ArgumentError` (a ValueError) for
    ``alpha`` outside (0, 1]."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 < _float(alpha) <= 1.0:
        raise ArgumentError(f"ema's alpha must be a number in (0, 1], got {alpha!r}", caller_location())
    alpha = float(alpha)
    return (api.map(lambda x: (alpha * x, where(x == x, 1.0 - alpha, x * 1.0)))
            >> api.scan(LINEAR, axis=axis, identity=(0.0, 1.0)) >> api.map(lambda y, decay: y))


def _max_and_shifted_sum(axis, keepdim: bool) -> api.Pipeline:
    """Per row: the largest element ``m`` and the sum of ``exp(x - m)``, by the pair combine, which counts the
    elements equal to an infinite ``m`` (``exp(m - m)`` taken as 1): what logsumexp needs."""
    return api.map(online.LIFT) >> api.reduce(online.LOG_SUM_EXP, axis=axis, keepdim=keepdim,
                                              identity=online.IDENTITY)


@_arguments_named
def softmax_denominators(axis=-1, keepdim: bool = False) -> api.Pipeline:
    """Per row along ``axis``: ``(m, s)`` with ``m`` the largest element and ``s = sum(exp(x - m))``, in one pass
    (the online normalizer: each partial sum is rescaled when a larger maximum arrives). ``softmax(x) =
    exp(x - m) / s``, as torch.softmax, special values included: a row holding ``+inf``, or only ``-inf``, has
    ``s`` NaN (its ``exp(inf - inf)`` is NaN, as in torch's sum), so its softmax is NaN; an empty row has
    ``(-inf, 0)``. Float inputs; NaN propagates."""
    return _max_and_shifted_sum(axis, keepdim) >> api.map(online.SOFTMAX_DENOMINATORS)


@_arguments_named
def logsumexp(axis=-1, keepdim: bool = False) -> api.Pipeline:
    """``log(sum(exp(x)))`` along ``axis`` as torch.logsumexp: ``m + log(s)`` of the max and the shifted sum
    (an all ``-inf`` row gives ``-inf``; ``+inf`` gives ``+inf``)."""
    return _max_and_shifted_sum(axis, keepdim) >> api.map(lambda m, s: where(s == 0.0, m, m + log(s)))


@_arguments_named
def softmax(axis=-1) -> api.Pipeline:
    """``exp(x - m) / s`` along ``axis``, as torch.softmax: one kernel, written as a user would (the row's
    maximum ``m`` attached, ``e = exp(x - m)``, its sum ``s`` attached, ``e / s``). A row held on chip computes one
    ``exp`` an element; a longer row is swept twice, by the one-pass form the planner derives (the online
    normalizer, :func:`softmax_denominators`). Float inputs; the result has the input's shape and dtype (half
    types computed in float32). A row holding NaN or ``+inf``, or only ``-inf``, is NaN, as torch's."""
    pipe = (api.attach(api.max(axis=axis)) >> api.map(lambda v, m: exp(v - m)) >> api.attach(api.sum(axis=axis))
            >> api.map(lambda e, s: e / s))
    backward.softmax(pipe, axis)
    return pipe


@_arguments_named
def log_softmax(axis=-1) -> api.Pipeline:
    """``x - m - log(s)`` along ``axis``, as torch.log_softmax, in the form :func:`softmax` takes (special values
    as its)."""
    pipe = (api.attach(api.max(axis=axis)) >> api.map(lambda v, m: (v - m, exp(v - m)))
            >> api.attach(api.map(lambda d, e: e) >> api.sum(axis=axis)) >> api.map(lambda d, e, s: d - log(s)))
    backward.log_softmax(pipe, axis)
    return pipe


_REDUCTIONS = ("none", "mean", "sum")
_SUMS = online.SUM_PAIRS


def _class_axis(axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ArgumentError(f"cross_entropy's axis must be an int (the class axis: 1, as torch's, for (N, C, ...) "
                            f"logits; -1 or 0 for a single row (C,)), got {axis!r}", caller_location())
    return axis


@_arguments_named
def cross_entropy(ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                  axis: int = 1) -> api.Pipeline:
    """torch.nn.functional.cross_entropy with class-index targets, per row: ``lse - (1 - ε) x[t] - ε mean(x)``
    with ``lse`` the row's logsumexp along the class ``axis`` and ``ε`` the ``label_smoothing`` (Szegedy et al.,
    "Rethinking the Inception Architecture", 2016, as torch defines it); 0 where the target is
    ``ignore_index``. Inputs: logits ``(N, C, ...)``, float; targets, integer class indices with the class axis
    kept at size 1 (``target[:, None]`` for ``(N,)`` targets: a view, no copy). One kernel: the softmax denominators
    attached (and for ``ε > 0`` the mean), then the row's one term, at ``index(axis) == t``, summed; a row too
    long for one tile is read once and then at the target alone, as Liger-Kernel's forward reads it.
    The result has the targets' shape without the class axis, in the logits' dtype (half types computed in
    float32). A target out of ``[0, C)`` that is not ``ignore_index`` gives NaN for its row (torch raises; a
    kernel cannot, and a silent 0 would hide it). Targets of any integer dtype are compared exactly; a float
    target, which torch refuses here (its float targets are class probabilities), is taken as a class index, NaN
    where it is not a whole number in range. Raises :class:`~tricomb.ShapeError` when called with targets that
    do not keep the class axis at size 1 (torch's ``(N,)`` ones).

    ``reduction``: ``"none"``, each row's loss; ``"sum"``, their sum; ``"mean"``, their sum over the rows whose
    target is not ``ignore_index`` divided by the count of those rows (NaN when every row is ignored), as torch's.
    The sum and mean are a reduce over the rows in the same kernel: each program sums its rows, the last program
    the programs' sums, in order (the same result from run to run); a 0-d result. Raises
    :class:`~tricomb.ArgumentError` for an unknown reduction, a smoothing outside [0, 1] or an axis or
    ignore_index that is not an int."""
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"cross_entropy's reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, as "
                            f"torch's, got {reduction!r}", caller_location())
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise ArgumentError(f"cross_entropy's ignore_index must be an int, got {ignore_index!r}", caller_location())
    smoothing = _float(label_smoothing) if isinstance(label_smoothing, numbers.Real) and \
        not isinstance(label_smoothing, bool) else None
    if smoothing is None or not 0.0 <= smoothing <= 1.0:
        raise ArgumentError(f"cross_entropy's label_smoothing must be a number in [0, 1], as torch's, got "
                            f"{label_smoothing!r}", caller_location())
    axis = _class_axis(axis)
    rows = _cross_entropy_rows(ignore_index, smoothing, axis)
    if reduction == "mean":
        # the rows whose target is a class (hits 1; an ignored row's are -1) counted as integers: exact, and the
        # loss's dtype is the mean's (a float divided by an integer keeps its dtype in torch's promotion)
        pipe = (rows >> api.map(lambda loss, hits: (where(hits == 0.0, _NAN, loss), where(hits > 0.0, 1, 0)))
                >> api.reduce(_SUMS, identity=(0.0, 0)) >> api.map(lambda total, count: total / count))
    else:
        losses = rows >> api.map(lambda loss, hits: where(hits == 0.0, _NAN, loss))
        pipe = losses if reduction == "none" else losses >> api.sum()
    backward.cross_entropy(pipe, ignore_index, reduction, smoothing, axis, _ignored(ignore_index))
    return pipe


def _ignored(ignore_index: int):
    """Whether a target ``t`` is ``ignore_index``, taken in t's own dtype, wrapping an ignore_index out of its
    range (-100 is 156 in uint8), and the float compare rounds above 2**24; a target equal both ways is
    ignore_index itself (a wrapped one differs from t by 2**8 or more, which float32 tells apart below 2**31)."""
    return lambda t: (t == ignore_index) & (t + 0.0 == float(ignore_index))


def _cross_entropy_rows(ignore_index: int, smoothing: float, axis: int) -> api.Pipeline:
    """Each row's loss and hits: the softmax denominators ``(m, s)`` attached (and with smoothing the row's mean),
    then per element its term at the row's one position ``p`` (the target, or 0 on an ignored row) and a hit (1,
    or -1 on an ignored row), summed: a row's hits are 0 where its target is out of range. ``log(s) - (x - m)`` is torch's ``-log_softmax``, NaN where a row holds NaN or
    ``+inf``, or only ``-inf``, as torch's. The sums are of one position a row, so the planner reads a long row
    once and that element alone after it (:func:`~tricomb.lower.derive.one_hot`)."""
    index = BUILTINS["index"]
    kept = 1.0 - smoothing

    def terms(v, m, s, *mean_and_target):
        *mean, t = mean_and_target
        ignored = _ignored(ignore_index)(t)
        at = index(axis) == where(ignored, 0, t)
        loss = log(s) - kept * (v - m) - smoothing * (mean[0] - m) if mean else log(s) - (v - m)
        return where(at, where(ignored, 0.0, loss), 0.0), where(at, where(ignored, -1.0, 1.0), 0.0)

    stream = api.attach(softmax_denominators(axis=axis))
    if smoothing > 0.0:
        stream = stream >> api.attach(api.map(lambda v, m, s: v) >> api.mean(axis=axis))
    per_element = online.as_lambda(online.taking(terms, 4 if smoothing == 0.0 else 5), "cross_entropy's terms")
    return stream >> api.zip_with(per_element, constant_along=axis) >> api.reduce(_SUMS, axis=axis, identity=(0.0, 0.0))


def _eps(eps, name: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not _float(eps) >= 0.0:
        raise ArgumentError(f"{name}'s eps must be a number >= 0, got {eps!r}", caller_location())
    return float(eps)


def _flag(value, name: str, what: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{name}'s {what} must be True or False (whether the pipeline takes a {what} input), "
                            f"got {value!r}", caller_location())
    return value


def _trailing(axis, name: str):
    """A norm's axes: -1, or a tuple of trailing negative axes ((-2, -1)), as torch's ``normalized_shape`` names the
    last dimensions (a weight then broadcasts along exactly those)."""
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not axes or any(isinstance(a, bool) or not isinstance(a, int) for a in axes) or \
            sorted(axes) != list(range(-len(axes), 0)):
        raise ArgumentError(f"{name}'s axis must be -1 or a tuple of the trailing axes counted from the end "
                            f"((-2, -1)), as torch's normalized_shape names the last dimensions; got {axis!r}",
                            caller_location())
    return axis


def _scaled(weight: bool, bias: bool):
    """The last stage of a norm: the normalized value ``u`` times a weight input and plus a bias input, each
    present or not (a zip_with bringing them in, or a map)."""
    if weight and bias:
        return api.zip_with(lambda u, w, b: u * w + b)
    if weight or bias:
        return api.zip_with(lambda u, w: u * w) if weight else api.zip_with(lambda u, b: u + b)
    return None


@_arguments_named
def layer_norm(eps: float = 1e-5, weight: bool = True, bias: bool = True, axis=-1) -> api.Pipeline:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over ``axis`` (the last: torch's ``normalized_shape``
    of one dimension; a tuple of trailing axes for more), as torch.nn.functional.layer_norm: the mean and the
    biased variance of each row, the variance taken of the shifted values ``x - mean`` (two passes over the row,
    which cancel nothing; one read when the row fits on chip). Inputs ``x``, then ``weight`` and ``bias`` when
    given (each broadcast as torch does: shaped like the normalized axes); the result's dtype is torch's
    promotion of theirs (give the weight and bias in ``x``'s dtype: torch's layer_norm keeps ``x``'s). Raises
    :class:`~tricomb.ArgumentError` for a negative ``eps``, axes that are not the trailing ones, or a flag that is
    not a bool."""
    eps, axis = _eps(eps, "layer_norm"), _trailing(axis, "layer_norm")
    weight, bias = _flag(weight, "layer_norm", "weight"), _flag(bias, "layer_norm", "bias")
    centered = api.attach(api.mean(axis=axis)) >> api.map(lambda v, mean: v - mean)
    normalized = centered >> api.attach(api.map(lambda d: d * d) >> api.mean(axis=axis)) >> api.map(
        lambda d, var: d * rsqrt(var + eps))
    scaled = _scaled(weight, bias)
    pipe = normalized if scaled is None else normalized >> scaled
    backward.layer_norm(pipe, eps, weight, bias, axis)
    return pipe


@_arguments_named
def rms_norm(eps: float = 1e-6, weight: bool = True, axis=-1) -> api.Pipeline:
    """``x * rsqrt(mean(x ** 2) + eps) * weight`` over ``axis`` (the last, or a tuple of trailing axes), as
    torch.nn.functional.rms_norm with this ``eps`` (torch's default, None, means ``torch.finfo(x.dtype).eps``:
    pass that number to match it). Inputs ``x``, then ``weight`` when given. One kernel; half types computed in
    float32 and rounded once. The result's dtype is torch's promotion of ``x``'s and the weight's (torch keeps
    ``x``'s for a float32 weight on half ``x``: give the weight in ``x``'s dtype). Raises
    :class:`~tricomb.ArgumentError` for a negative ``eps`` or axes that are not the trailing ones."""
    eps, axis = _eps(eps, "rms_norm"), _trailing(axis, "rms_norm")
    weight = _flag(weight, "rms_norm", "weight")
    normalized = api.attach(api.map(lambda v: v * v) >> api.mean(axis=axis)) >> api.map(
        lambda v, ms: v * rsqrt(ms + eps))
    pipe = normalized >> api.zip_with(lambda u, w: u * w) if weight else normalized
    backward.rms_norm(pipe, eps, weight, axis)
    return pipe


def _moments(axis, keepdim: bool) -> api.Pipeline:
    triples = api.map(lambda x: (where(x == x, 1.0, x * 1.0), x * 1.0, where(x == x, 0.0, x * 1.0)))  # n, mean, M2
    return triples >> api.reduce(WELFORD, axis=axis, keepdim=keepdim, identity=(0.0, 0.0, 0.0))


def _float(value: numbers.Real) -> float:
    """``value`` as a float; an integer too large for one is infinite."""
    try:
        return float(value)
    except OverflowError:
        return _INF if value > 0 else -_INF


def _correction(correction) -> int:
    if isinstance(correction, bool) or not isinstance(correction, numbers.Integral):
        raise ArgumentError(f"correction must be an int (1: the sample variance, 0: the population one), got "
                            f"{correction!r}", caller_location())
    return int(correction)


def _dof(n, correction: int):
    """torch.var's divisor: ``max(0, n - correction)`` (so nothing left gives NaN or inf, as torch's)."""
    return where(n - correction > 0, n - correction, 0.0)


@_arguments_named
def var(axis=None, keepdim: bool = False, correction: int = 1) -> api.Pipeline:
    """The variance along ``axis`` as torch.var: the sum of squared deviations over ``count - correction``
    (``correction=1``: the sample variance; 0: the population one), in one pass of Welford merges (Chan, Golub
    and LeVeque 1983), stable where the sum-of-squares formula cancels. Float inputs."""
    correction = _correction(correction)
    pipe = _moments(axis, keepdim) >> api.map(lambda n, mean, m2: m2 / _dof(n, correction))
    backward.variance(pipe, axis, keepdim, correction, root=False)
    return pipe


@_arguments_named
def std(axis=None, keepdim: bool = False, correction: int = 1) -> api.Pipeline:
    """The standard deviation along ``axis`` as torch.std: the square root of :func:`var`."""
    correction = _correction(correction)
    pipe = _moments(axis, keepdim) >> api.map(lambda n, mean, m2: sqrt(m2 / _dof(n, correction)))
    backward.variance(pipe, axis, keepdim, correction, root=True)
    return pipe


@_arguments_named
def norm(ord: float = 2.0, axis=None, keepdim: bool = False) -> api.Pipeline:  # noqa: A002 - torch's name
    """The vector norm along ``axis`` as torch.linalg.vector_norm: ``ord`` 2 (the square root of the sum of
    squares), 1 (the sum of magnitudes), ``inf`` (the largest magnitude) or any other positive number p
    (``sum(|x| ** p) ** (1 / p)``). Float inputs. Raises :class:`~tricomb.ArgumentError` (a ValueError) for an
    ``ord`` that is not a positive number (torch's matrix norms, "fro" say, are not vector norms)."""
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real) or not _float(ord) > 0.0:
        raise ArgumentError(f"norm's ord must be a positive number (or inf), got {ord!r}", caller_location())
    ord = _float(ord)
    if ord == _INF:
        return api.map(lambda x: abs_(x * 1.0)) >> api.max(axis=axis, keepdim=keepdim)
    if ord == 2.0:
        return api.map(lambda x: (x * 1.0) * x) >> api.sum(axis=axis, keepdim=keepdim) >> api.map(sqrt)
    if ord == 1.0:
        return api.map(lambda x: abs_(x * 1.0)) >> api.sum(axis=axis, keepdim=keepdim)
    return (api.map(lambda x: abs_(x * 1.0) ** ord) >> api.sum(axis=axis, keepdim=keepdim)
            >> api.map(lambda s: s ** (1.0 / ord)))


mean = api.mean


def _adamw(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
    """One AdamW update of one element: the parameter, its two moments (the algorithm of torch.optim.AdamW,
    after I. Loshchilov and F. Hutter, "Decoupled Weight Decay Regularization", ICLR 2019, Algorithm 2)."""
    m = m + (1 - beta1) * (g - m)  # torch's exp_avg.lerp_(grad, 1 - beta1)
    v = beta2 * v + (1 - beta2) * g * g
    step_size = lr / (1 - beta1 ** step)
    denom = sqrt(v) / sqrt(1 - beta2 ** step) + eps
    return p * (1 - lr * weight_decay) - step_size * m / denom, m, v


_ADAMW = api.foreach(api.zip_with(_adamw))  # (built at import: torch.compile traces adamw_step, not its building)


def adamw_step(params, grads, exp_avgs, exp_avg_sqs, *, lr, beta1: float = 0.9, beta2: float = 0.999,
               eps: float = 1e-8, weight_decay: float = 1e-2, step) -> None:
    """One AdamW step, in place over lists of tensors: ``params``, their ``grads``, and the first and second moment
    buffers ``exp_avgs`` and ``exp_avg_sqs`` (lists of one length, the tensors of one position of one shape; any
    float dtypes, each group of one device and dtypes one kernel launch, :func:`tricomb.foreach`).

    ``step`` is the step's number, counting from 1 (torch's ``state["step"]`` after its increment); ``lr``,
    ``beta1``, ``beta2``, ``eps`` and ``weight_decay`` are runtime scalars (a new value compiles nothing), or
    ``lr`` a 0-d tensor on the device (a schedule that updates it without a host sync; CUDA graphs replay it).
    The update is torch.optim.AdamW's (amsgrad and maximize off): decay ``p *= 1 - lr * weight_decay``; moments
    ``m += (1 - beta1) * (g - m)``, ``v = beta2 * v + (1 - beta2) * g * g``; then
    ``p -= lr / (1 - beta1 ** step) * m / (sqrt(v) / sqrt(1 - beta2 ** step) + eps)``, the bias corrections
    computed in double precision as Python computes them. Raises what :class:`tricomb.Foreach` raises, and
    ArgumentError for a ``step`` number below 1 or from 2**63 (a 0-d tensor's value is not read: that would wait
    for the device; 0 there gives NaN parameters, as in torch)."""
    if isinstance(step, numbers.Real) and not isinstance(step, bool) and not 1 <= step < 2 ** 63:
        raise ArgumentError(f"step={step}: the step's number counts from 1 (torch's state['step'] after its "
                            "increment) and is below 2**63; the bias corrections divide by 1 - beta ** step",
                            caller_location())
    for name, value in (("lr", lr), ("beta1", beta1), ("beta2", beta2), ("eps", eps), ("weight_decay", weight_decay),
                        ("step", step)):
        if not isinstance(value, (numbers.Real, torch.Tensor)) or isinstance(value, torch.Tensor) and value.dim():
            raise ArgumentError(f"{name}={value!r}: give a number, or a 0-d tensor on the parameters' device",
                                caller_location())
    _ADAMW(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step,
                     out=(params, exp_avgs, exp_avg_sqs))

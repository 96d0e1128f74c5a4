"""The backward of tc.library's softmax, log_softmax and norms: one attach kernel each over the saved values and
the cotangent, as a hand-written kernel computes it (the chain of pullbacks through their attaches would read
every row several times). Each is registered for its forward pipeline with :func:`tricomb.autograd.backward.
define`; a weight's and a bias's gradients are the per-element terms summed over the rows, in the same kernel
(``PipelineIR.column_sums``: no term is written and read back) where the parameter is one for every row, else
written and summed by :func:`summed_to` along the axes it broadcasts (:func:`_fitting`).

The formulas, with ``g`` the cotangent of the result ``y`` along a row of ``n`` elements:

* softmax: ``dx = y * (g - sum(y * g))``; log_softmax: ``dx = g - exp(y) * sum(g)``
  (J. S. Bridle, "Training stochastic model recognition algorithms as networks...", NIPS 1989);
* rms_norm, ``r = rsqrt(mean(x**2) + eps)``, ``h = g * w``: ``dx = r * h - r**3 * x * mean(h * x)``,
  ``dw = sum over rows of g * x * r`` (B. Zhang and R. Sennrich, "Root Mean Square Layer Normalization", 2019);
* layer_norm, ``xh = (x - mean) * r``, ``r = rsqrt(var + eps)``, ``h = g * w``:
  ``dx = r * (h - mean(h) - xh * mean(h * xh))``, ``dw = sum of g * xh``, ``db = sum of g``
  (J. L. Ba, J. R. Kiros and G. E. Hinton, "Layer Normalization", 2016).

* var, over ``n`` elements with ``dof = n - correction`` (not clamped at 0 here, as torch's backward over axes;
  ``2 / 0`` is inf): ``dx = (2 / dof) * g * (x - mean)``; std, its
  result ``y``: the same with ``g / (2 y)`` for ``g``, 0 where ``y`` is 0 (torch's ``var_backward`` and
  ``std_backward``, tools/autograd/templates, FunctionsManual.cpp).

What is saved: softmax and log_softmax use their result (not their input); the norms recompute the row's
statistics from the input in the backward kernel; var and std recompute the mean (std reads its result too).
"""
from __future__ import annotations

import dataclasses
import math

from . import api
from .autograd.backward import define
from .autograd.gather import summed_to
from .pipeline import online
from .pipeline.ir import PipelineIR
from .scalar.trace import BUILTINS

exp, rsqrt, where = BUILTINS["exp"], BUILTINS["rsqrt"], BUILTINS["where"]


_SUM2, _SUM3 = online.SUM_PAIRS, online.SUM_TRIPLES


def _one(x):
    """1 in ``x``'s dtype and shape (summed, it counts a row's elements; NaN where ``x`` is, whose row's
    gradients are NaN anyway)."""
    return where(x == x, 1.0, x)


def _in_order(wanted, grads: dict) -> list:
    return [grads.get(i) for i in wanted]


def softmax(forward: api.Pipeline, axis) -> None:
    back = (api.zip_with(lambda y, g: (y, g)) >> api.attach(api.map(lambda y, g: y * g) >> api.sum(axis=axis))
            >> api.map(lambda y, g, s: y * (g - s)))

    def rule(inputs, result, grads, wanted, run):
        return [run(back.ir, (result[0], grads[0]))[0]]
    define(forward.ir, rule)


def log_softmax(forward: api.Pipeline, axis) -> None:
    back = (api.zip_with(lambda y, g: (y, g)) >> api.attach(api.map(lambda y, g: g) >> api.sum(axis=axis))
            >> api.map(lambda y, g, s: g - exp(y) * s))

    def rule(inputs, result, grads, wanted, run):
        return [run(back.ir, (result[0], grads[0]))[0]]
    define(forward.ir, rule)


def _weighted(weight: bool) -> api.Pipeline:
    """The stream ``(x, h, g)`` of the input, the cotangent times the weight, and the cotangent."""
    return api.zip_with(lambda x, g, w: (x, g * w, g)) if weight else api.zip_with(lambda x, g: (x, g, g))


def _summed(pipe: api.Pipeline, count: int) -> PipelineIR:
    """``pipe``'s IR with its last ``count`` result fields summed over the rows in its own kernel (a weight's and a
    bias's gradients: no per-element term is written and read back)."""
    width = pipe.ir.width
    return dataclasses.replace(pipe.ir, column_sums=tuple(range(width - count, width)))


def _fitting(ir: PipelineIR, x, params, axis) -> PipelineIR:
    """``ir`` where every parameter has size 1 along each kept axis of ``x`` (its gradient is the terms summed over
    every row); else ``ir`` with its terms stored, for :func:`summed_to` to sum over the axes each broadcasts
    along (a weight of ``x``'s full shape, or one per row of a 3-d input)."""
    reduced = len(axis) if isinstance(axis, tuple) else 1
    kept = x.dim() - reduced
    for t in params:
        shape = (1,) * (x.dim() - t.dim()) + tuple(t.shape)
        if any(n != 1 for n in shape[:kept]):
            return dataclasses.replace(ir, column_sums=())
    return ir


def rms_norm(forward: api.Pipeline, eps: float, weight: bool, axis) -> None:
    def back(weight_grad: bool) -> PipelineIR:
        # one fold for both row sums the formula needs (and the row's length, counted)
        stream = (_weighted(weight) >> api.attach(api.map(lambda x, h, g: (x * x, h * x, _one(x)))
                                                  >> api.reduce(_SUM3, axis=axis, identity=(0.0, 0.0, 0.0)))
                  >> api.map(lambda x, h, g, sxx, shx, n: (x, h, g, rsqrt(sxx / n + eps), shx / n)))
        if weight_grad:
            return _summed(stream >> api.map(lambda x, h, g, r, m: (r * h - r * r * r * x * m, g * x * r)), 1)
        return (stream >> api.map(lambda x, h, g, r, m: r * h - r * r * r * x * m)).ir
    pipes = {flag: back(flag) for flag in ((False, True) if weight else (False,))}

    def rule(inputs, result, grads, wanted, run):
        x, g = inputs[0], grads[0]
        weight_grad = 1 in wanted
        fields = run(_fitting(pipes[weight_grad], x, inputs[1:], axis), (x, g, *inputs[1:]))
        found = {0: fields[0].to(x.dtype)}
        if weight_grad:
            found[1] = summed_to(fields[1], inputs[1].shape, run).to(inputs[1].dtype)
        return _in_order(wanted, found)
    define(forward.ir, rule)


def layer_norm(forward: api.Pipeline, eps: float, weight: bool, bias: bool, axis) -> None:
    def back(weight_grad: bool, bias_grad: bool) -> PipelineIR:
        # two folds: the sums of x and h (and the row's length); then of d * d and h * d, d = x - mean, since
        # mean(h * xh) = r * mean(h * d)
        stream = (_weighted(weight) >> api.attach(api.map(lambda x, h, g: (x, h, _one(x)))
                                                  >> api.reduce(_SUM3, axis=axis, identity=(0.0, 0.0, 0.0)))
                  >> api.map(lambda x, h, g, sx, sh, n: (x - sx / n, h, g, sh / n, n))
                  >> api.attach(api.map(lambda d, h, g, mh, n: (d * d, h * d))
                                >> api.reduce(_SUM2, axis=axis, identity=(0.0, 0.0)))
                  >> api.map(lambda d, h, g, mh, n, sdd, shd: (d, h, g, mh, rsqrt(sdd / n + eps), shd / n)))
        dx = api.map(lambda d, h, g, mh, r, mhd: r * (h - mh - d * r * r * mhd))
        if not (weight_grad or bias_grad):
            return (stream >> dx).ir
        # dx, then the weight's term g * xh and the bias's g, each summed over the rows in the same kernel
        terms = api.map(lambda d, h, g, mh, r, mhd: (r * (h - mh - d * r * r * mhd),)
                        + ((g * d * r,) if weight_grad else ()) + ((g,) if bias_grad else ()))
        return _summed(stream >> terms, weight_grad + bias_grad)
    flags = [(w_, b_) for w_ in ((False, True) if weight else (False,)) for b_ in ((False, True) if bias else (False,))]
    pipes = {flag: back(*flag) for flag in flags}

    def rule(inputs, result, grads, wanted, run):
        x, g = inputs[0], grads[0]
        b = 2 if weight else 1
        weight_grad, bias_grad = weight and 1 in wanted, bias and b in wanted
        fields = run(_fitting(pipes[weight_grad, bias_grad], x, inputs[1:], axis),
                     (x, g, *(inputs[1:2] if weight else ())))
        found = {0: fields[0].to(x.dtype)}
        if weight_grad:
            found[1] = summed_to(fields[1], inputs[1].shape, run).to(inputs[1].dtype)
        if bias_grad:
            found[b] = summed_to(fields[-1], inputs[b].shape, run).to(inputs[b].dtype)
        return _in_order(wanted, found)
    define(forward.ir, rule)


def variance(forward: api.Pipeline, axis, keepdim: bool, correction: int, root: bool) -> None:
    """var's (``root``: std's) backward: one attach kernel over the input, the cotangent and (std) the result,
    each broadcast back along the reduced axes; one such pipeline per divisor, which the sizes fix."""
    pipes: dict[float, api.Pipeline] = {}

    def back(scale: float) -> api.Pipeline:
        if scale not in pipes:
            if root:
                term = api.zip_with(lambda x, g, y: (x, where(y == 0.0, 0.0, g / (y + y))))
            else:
                term = api.zip_with(lambda x, g: (x, g))
            pipes[scale] = (term >> api.attach(api.map(lambda x, h: x) >> api.mean(axis=axis))
                            >> api.map(lambda x, h, mu: scale * (h * (x - mu))))
        return pipes[scale]

    def rule(inputs, result, grads, wanted, run):
        x = inputs[0]
        rank = x.dim()
        given = axis if isinstance(axis, tuple) else () if axis is None else (axis,)
        # torch's reading: no axis (None, or ()) reduces them all; a 0-d input's axis 0 or -1 is its one element
        axes = tuple(a % rank for a in given) if given and rank else tuple(range(rank))
        kept = [grads[0], result[0]] if root else [grads[0]]
        if not keepdim:  # (broadcast back along the reduced axes, as keepdim=True would keep them)
            kept = [t.reshape([1 if d in axes else n for d, n in enumerate(x.shape)]) for t in kept]
        dof = math.prod(x.shape[a] for a in axes) - correction  # (unclamped, as torch's var_backward over dims)
        scale = 2.0 / dof if dof else math.inf
        return [run(back(scale).ir, (x, *kept))[0].to(x.dtype)]
    define(forward.ir, rule)


def cross_entropy(forward: api.Pipeline, ignore_index: int, reduction: str, smoothing: float, axis: int,
                  ignored) -> None:
    """The logits' gradient, one attach kernel: ``scale * (softmax(x) - (1 - ε) onehot(t) - ε / C)`` on each row
    whose target is a class, 0 on an ignored row, with ``scale`` the row's cotangent (``"none"``), the loss's
    (``"sum"``), or the loss's over the count of rows not ignored (``"mean"``, counted by one more kernel over
    the targets). ``ignored(t)`` is the forward's own test of a target. The targets get no gradient (torch's
    are integers). A row whose target is out of range, NaN forward, gets the gradient of no target."""
    index = BUILTINS["index"]
    where = BUILTINS["where"]
    counted = api.map(lambda t: where(ignored(t), 0, 1)) >> api.sum()
    pipes: dict[int, api.Pipeline] = {}

    def back(classes: int) -> api.Pipeline:
        if classes not in pipes:
            def term(v, m, s, t, g, *count):
                p, spread = exp(v - m) / s, smoothing / classes
                # (each constant meets p, so the difference is taken in p's dtype, not a constant's float32)
                shifted = where(index(axis) == t, p - (1.0 - smoothing + spread), p - spread)
                scale = g / count[0] if count else g
                return where(ignored(t), 0.0, scale * shifted)
            from .library import softmax_denominators
            pipes[classes] = (api.attach(softmax_denominators(axis=axis))
                              >> api.zip_with(online.taking(term, 6 if reduction == "mean" else 5),
                                              constant_along=axis))
        return pipes[classes]

    def rule(inputs, result, grads, wanted, run):
        x, t = inputs
        rank = x.dim()
        g = grads[0].unsqueeze(axis % rank) if reduction == "none" else grads[0].reshape((1,) * rank)
        count = (run(counted.ir, (t,))[0].reshape((1,) * rank),) if reduction == "mean" else ()
        dx = run(back(x.shape[axis]).ir, (x, t, g, *count))[0]
        return [dx.to(x.dtype) if i == 0 else None for i in wanted]
    define(forward.ir, rule)

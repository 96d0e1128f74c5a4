"""Gradients: backward kernels derived from the forward IR, against torch.autograd and finite differences.

Grouped by what they check: the derivative table (every builtin against torch's own derivative, at ordinary
points and at torch's edge conventions), drawn pipelines (gradcheck and equality with torch differentiating
the reference evaluation), what a backward runs (kernel counts, dtypes, which inputs get gradients), and the
refusals (before anything launches).
"""
import math
import warnings

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings

import tricomb as tc
from conftest import DEVICES
from tricomb.errors import UnsupportedError
from tricomb.pipeline.evaluate import evaluate
from tricomb.scalar.builtins import OPS, PUBLIC
from tricomb.scalar.derivatives import NO_GRADIENT, VJP, rule_for
from tricomb.testing import count_launches
from tricomb.testing.strategies import differentiable_cases

# values where each builtin is differentiable, and its torch reference defined
_POSITIVE = ("log", "log2", "sqrt", "rsqrt", "reciprocal")
_FLOAT_DTYPES = (torch.float64, torch.float32)


def _points(name: str, n: int, dtype, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    low, high = (0.2, 3.0) if name in _POSITIVE else (-3.0, 3.0)
    return (low + (high - low) * torch.rand(n, generator=gen, dtype=torch.float64)).to(dtype).to(device)


def _grads(fn, inputs, cotangent):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, cotangent, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads)]


def _close(dtype):
    return {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 1e-6}


# ---- the derivative table ---------------------------------------------------------------------------------------

def test_every_builtin_has_a_derivative_entry():
    for name, spec in OPS.items():
        if spec.converts_to is None:
            assert (name in VJP) != (name in NO_GRADIENT), name
        assert rule_for(name) is not None or name in NO_GRADIENT


_DIFFERENTIABLE = sorted(n for n, s in PUBLIC.items() if n in VJP and n != "where")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", _FLOAT_DTYPES)
@pytest.mark.parametrize("name", _DIFFERENTIABLE)
def test_builtin_gradient_equals_torch(name, dtype, device):
    spec = PUBLIC[name]
    inputs = [_points(name, 16, dtype, device, seed=k) for k in range(spec.arity)]
    if name == "pow":
        inputs[0] = inputs[0].abs() + 0.2
    pipe = tc.map(tc.__dict__[name]) if spec.arity == 1 else tc.zip_with(tc.__dict__[name])
    cotangent = _points("g", 16, dtype, device, seed=7)
    ours = _grads(pipe, inputs, cotangent)
    theirs = _grads(spec.torch, inputs, cotangent)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, **_close(dtype))


# torch's conventions where a function is not differentiable, or switches formula
_EDGES = [
    ("maximum", [[1.0, 2.0, 3.0, -0.0], [1.0, 1.0, 4.0, 0.0]]),  # ties: half to each side
    ("minimum", [[1.0, 2.0, 3.0, float("nan")], [1.0, 1.0, 4.0, 2.0]]),
    ("relu", [[0.0, -0.0, 1.0, -1.0]]),
    ("abs", [[0.0, -0.0, 2.0, -2.0]]),
    ("softplus", [[19.9, 20.0, 20.1, 30.0]]),
    ("pow", [[0.0, 0.0, 2.0, 0.0], [0.0, 2.0, 0.0, -1.0]]),
    ("sqrt", [[0.0, 1.0, 4.0, 9.0]]),
    ("logaddexp", [[float("-inf"), 0.0, 1.0, 5.0], [0.0, float("-inf"), 1.0, -5.0]]),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, values", _EDGES, ids=[e[0] for e in _EDGES])
def test_builtin_gradient_follows_torch_at_edges(name, values, device):
    spec = PUBLIC[name]
    inputs = [torch.tensor(v, dtype=torch.float64, device=device) for v in values]
    pipe = tc.map(tc.__dict__[name]) if spec.arity == 1 else tc.zip_with(tc.__dict__[name])
    cotangent = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64, device=device)
    for a, b in zip(_grads(pipe, inputs, cotangent), _grads(spec.torch, inputs, cotangent)):
        torch.testing.assert_close(a, b, equal_nan=True)


def test_where_sends_the_cotangent_to_the_branch_taken(device):
    c = torch.tensor([True, False, True], device=device)
    a, b = (torch.tensor(v, dtype=torch.float64, device=device, requires_grad=True) for v in ([1., 2, 3], [4., 5, 6]))
    tc.zip_with(lambda c, a, b: tc.where(c, a * a, b))(c, a, b).sum().backward()
    assert a.grad.tolist() == [2.0, 0.0, 6.0] and b.grad.tolist() == [0.0, 1.0, 0.0]


# ---- drawn pipelines ---------------------------------------------------------------------------------------------

@settings(max_examples=25)
@given(case=differentiable_cases())
def test_gradcheck(case):
    inputs = [t.clone().requires_grad_(True) for t in case.inputs]
    assert torch.autograd.gradcheck(case.pipeline, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True)


@settings(max_examples=40)
@given(case=differentiable_cases())
def test_gradients_equal_torch_differentiating_the_reference(case):
    cotangent_seed = torch.Generator().manual_seed(len(case.inputs))
    shape = evaluate(case.pipeline.ir, list(case.inputs)).shape
    cotangent = torch.randn(shape, generator=cotangent_seed, dtype=torch.float64)
    ours = _grads(case.pipeline, case.inputs, cotangent)
    theirs = _grads(lambda *xs: evaluate(case.pipeline.ir, list(xs)), case.inputs, cotangent)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="float32 and bfloat16 gradients on the GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_in_low_precision_are_as_accurate_as_torchs(dtype):
    """Both tricomb's gradient and torch's in ``dtype`` are compared with the float64 one: tricomb's error may be
    at most twice torch's, or a rounding of the dtype where torch's happens to be smaller. (Compared with each
    other they differ by both errors: a kernel rounds once where torch rounds after every op, and in bfloat16
    torch's own error reached 2.8% of the norm for a cumprod, tricomb's 0.24%, on an H100.)"""
    torch.manual_seed(0)
    x = torch.randn(64, 384, device="cuda", dtype=dtype)
    w = torch.randn(384, device="cuda", dtype=dtype)
    pipes = [tc.zip_with(lambda a, b: tc.silu(a) * b), tc.map(tc.softplus) >> tc.sum(axis=-1),
             tc.zip_with(lambda a, b: a * b) >> tc.reduce(tc.logaddexp, axis=-1), tc.cumsum(axis=-1),
             tc.zip_with(lambda a, b: tc.gelu_tanh(a) * 0.0 + a + b) >> tc.max(axis=0),
             # the adjoint rule: its reverse affine scan, the prefix recomputed in the input's precision
             tc.map(lambda a: 1.0 + 0.01 * a) >> tc.cumprod(axis=0),
             tc.zip_with(lambda a, b: (a, tc.sigmoid(b))) >> tc.scan(tc.library.LINEAR, axis=-1, identity=(0.0, 1.0))
             >> tc.map(lambda h, decay: h),
             # cut into pipelines of one fold each: the values between the parts held in the input's dtype
             tc.attach(tc.map(tc.square) >> tc.mean(axis=-1)) >> tc.zip_with(lambda v, ms, w: v * tc.rsqrt(ms + 1e-6) * w),
             tc.map(tc.sin) >> tc.attach(tc.reduce(tc.logaddexp, axis=-1)) >> tc.map(lambda v, lse: lse - v)
             >> tc.sum(axis=-1),
             tc.map(tc.sin) >> tc.cumsum(axis=-1) >> tc.map(tc.tanh) >> tc.sum(axis=-1)]
    # for the max: values distinct along each column and exact in bfloat16, so every side picks one element
    distinct = (torch.argsort(torch.rand(64, 384, device="cuda"), dim=0).to(dtype) / 8)
    # a few roundings of the dtype: a result of several ops (logaddexp's weights: a product, a difference, an exp)
    # carries a few ulps where torch's own error can happen to be smaller (float32, H100: 6.4e-7 against 1.7e-7)
    floor = 4 * torch.finfo(dtype).eps
    for pipe in pipes:
        inputs = ((distinct, torch.zeros_like(w)) if "max" in str(pipe) else (x, w))[:pipe.num_inputs]
        cotangent = torch.randn_like(pipe(*inputs))
        exact = _grads(lambda *xs: evaluate(pipe.ir, list(xs)), [t.double() for t in inputs], cotangent.double())
        ours = _grads(pipe, inputs, cotangent)
        theirs = _grads(lambda *xs: evaluate(pipe.ir, list(xs)), inputs, cotangent)
        for a, b, e in zip(ours, theirs, exact):
            assert a.dtype == b.dtype == dtype
            error = lambda t: ((t.double() - e).norm() / e.norm().clamp_min(1e-30)).item()  # noqa: E731
            assert error(a) <= 2 * error(b) + floor, (str(pipe), error(a), error(b))


# ---- folds by any operator: the adjoint rule ----------------------------------------------------------------

_ZEROS = torch.tensor([[0.5, 0.0, 2.0, -1.5, 3.0], [0.0, 1.5, 0.0, 2.0, -0.5], [1.0, -2.0, 0.5, 1.5, 2.5]])
_TIES = torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0], [2.0, float("nan"), 1.0, float("nan"), 4.0, 0.0]])
_TORCH_FOLDS = {  # tricomb's fold, torch's function, the input: zeros, ties and NaN where torch has a convention
    "prod": (tc.prod(axis=-1), lambda x: torch.prod(x, -1), _ZEROS),
    "prod all": (tc.prod(), torch.prod, _ZEROS),
    "prod two axes": (tc.prod(axis=(0, 1), keepdim=True), lambda x: x.prod(1, keepdim=True).prod(0, keepdim=True),
                      _ZEROS.reshape(3, 5, 1)),
    "cumprod": (tc.cumprod(axis=-1), lambda x: torch.cumprod(x, -1), _ZEROS),
    "cumprod reversed": (tc.cumprod(axis=0, reverse=True), lambda x: x.flip(0).cumprod(0).flip(0), _ZEROS),
    "logcumsumexp": (tc.scan(tc.logaddexp, axis=-1), lambda x: torch.logcumsumexp(x, -1), _ZEROS),
    "cummax": (tc.scan(tc.maximum, axis=-1), lambda x: torch.cummax(x, -1).values, _TIES),
    "cummin reversed": (tc.scan(tc.minimum, axis=-1, reverse=True),
                        lambda x: torch.cummin(x.flip(-1), -1).values.flip(-1), -_TIES),
    "cummax indices": (tc.cummax(axis=-1) >> tc.map(lambda v, i: v), lambda x: torch.cummax(x, -1).values, _TIES),
    "nansum": (tc.nansum(axis=-1), lambda x: torch.nansum(x, -1), _TIES),
}


@pytest.mark.parametrize("name", sorted(_TORCH_FOLDS))
def test_fold_gradients_follow_torch_at_zeros_ties_and_nan(name, device):
    """A product's gradient is the product of the other elements (no division by a zero), cummax/cummin's goes
    to the index each running value came from (the latest on ties, a NaN once seen), nansum's skips NaN."""
    pipe, reference, x = _TORCH_FOLDS[name]
    x = x.to(device, torch.float64)
    cotangent = torch.randn_like(reference(x))
    ours, theirs = _grads(pipe, [x], cotangent)[0], _grads(reference, [x], cotangent)[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12, equal_nan=True)


def _recurrence_closed_form(v, d, g, reverse: bool):
    """The gradient of ``h[t] = d[t] h[t-1] + v[t]`` written out: ``lam[t] = g[t] + d[t+1] lam[t+1]``,
    ``dv = lam``, ``dd[t] = lam[t] h[t-1]`` (from the end for ``reverse``: flipped)."""
    if reverse:
        dv, dd = _recurrence_closed_form(v.flip(-1), d.flip(-1), g.flip(-1), False)
        return dv.flip(-1), dd.flip(-1)
    n = v.shape[-1]
    h, prev = [], torch.zeros_like(v[..., 0])
    for t in range(n):
        prev = d[..., t] * prev + v[..., t]
        h.append(prev)
    lam, after = [None] * n, torch.zeros_like(v[..., 0])
    for t in reversed(range(n)):
        after = g[..., t] + (d[..., t + 1] * after if t + 1 < n else 0.0)
        lam[t] = after
    dv = torch.stack(lam, -1)
    dd = torch.stack([lam[t] * (h[t - 1] if t else torch.zeros_like(h[0])) for t in range(n)], -1)
    return dv, dd


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
def test_the_linear_recurrence_gradient_is_its_closed_form(reverse, device):
    """The general rule on the (value, decay) scan keeps one decay and one value (a cotangent on h alone
    reaches no product of decays), and equals the reverse recurrence with the decays shifted by one."""
    pipe = tc.library.linear_recurrence(reverse=reverse) >> tc.map(lambda h, decay: h)
    v = torch.randn(3, 9, dtype=torch.float64, device=device)
    d = torch.rand(3, 9, dtype=torch.float64, device=device)
    g = torch.randn(3, 9, dtype=torch.float64, device=device)
    ours = _grads(pipe, [v, d], g)
    for a, b in zip(ours, _recurrence_closed_form(v, d, g, reverse)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    plan = str(pipe.explain(v.requires_grad_(), d))
    adjoint_direction = "" if reverse else "reverse=True, "  # the adjoint runs against the forward scan
    assert f"scan affine({adjoint_direction}exclusive=True, identity=(1.0, 0.0))" in plan, plan


def _SCALED(s1, m1, s2, m2):
    """A running sum whose later terms are scaled by the running product of the scales before them."""
    return s1 + m1 * s2, m1 * m2


_SCALED_SUM = tc.zip_with(lambda s, m: (s, m)) >> tc.scan(_SCALED, identity=(0.0, 1.0)) >> tc.map(lambda s, m: s)

_ORDERED = {  # operators that do not commute, or have no identity, against torch differentiating the reference
    "recurrence over two axes": (tc.zip_with(lambda v, d: (v, d)) >> tc.reduce(tc.library.LINEAR, axis=(0, 2),
                                                                               identity=(0.0, 1.0))
                                 >> tc.map(lambda h, decay: h * decay), [(3, 2, 4), (3, 2, 4)]),
    "recurrence without identity": (tc.zip_with(lambda v, d: (v, d)) >> tc.scan(tc.library.LINEAR, axis=0,
                                                                                 reverse=True),
                                    [(5, 3), (5, 3)]),
    "exclusive recurrence": (tc.zip_with(lambda v, d: (v, d)) >> tc.scan(tc.library.LINEAR, exclusive=True,
                                                                         identity=(0.0, 1.0)), [(3, 6), (6,)]),
    "harmonic reduce": (tc.map(lambda x: 1.0 + x * x) >> tc.reduce(lambda a, b: a * b / (a + b), axis=-1),
                        [(3, 6)]),
    "welford": (tc.library.var(axis=-1, correction=0), [(4, 7)]),
    # a 0-d stream scans as one element: its cotangent and saved result too, so nothing computes in float32
    "running minimum of a 0-d stream": (tc.zip_with(tc.logaddexp) >> tc.zip_with(tc.mul)
                                        >> tc.scan(tc.minimum, axis=0, reverse=True), [(), (), ()]),
    # its pullback reads the prefix's second field, which no result holds: recomputed alone
    "scaled running sum": (_SCALED_SUM, [(3, 7), (3, 7)]),
    "scaled running sum, reversed": (tc.zip_with(lambda s, m: (s, m))
                                     >> tc.scan(_SCALED, axis=0, reverse=True, identity=(0.0, 1.0)), [(6, 2), (6, 1)]),
}


@pytest.mark.parametrize("name", sorted(_ORDERED))
def test_operator_gradients_keep_the_operators_order(name, device):
    pipe, shapes = _ORDERED[name]
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.rand(s, generator=gen, dtype=torch.float64).to(device) for s in shapes]
    out = pipe(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    cotangents = [torch.randn_like(o) for o in outs]

    def both(fn):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        result = fn(*leaves)
        result = result if isinstance(result, tuple) else (result,)
        return torch.autograd.grad(result, leaves, cotangents)
    for a, b in zip(both(pipe), both(lambda *xs: evaluate(pipe.ir, list(xs)))):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


# ---- pipelines that fold more than once: cut into parts, their backwards chained -----------------------------

def _PAIR_SUM(s1, q1, s2, q2):
    return s1 + s2, q1 + q2


_COMPOSED = {
    "attach of a map and a mean": (tc.attach(tc.map(tc.square) >> tc.mean(axis=-1))
                                   >> tc.zip_with(lambda v, ms, w: v * tc.rsqrt(ms + 1e-6) * w), [(4, 7), (7,)]),
    "attach, then a sum over the rows": (tc.map(tc.sin) >> tc.attach(tc.reduce(tc.logaddexp, axis=-1))
                                         >> tc.map(lambda v, lse: lse - v) >> tc.sum(axis=-1), [(3, 5)]),
    "two attaches along axis 0": (tc.attach(tc.mean(axis=0)) >> tc.map(lambda v, m: v - m)
                                  >> tc.attach(tc.map(tc.square) >> tc.sum(axis=0))
                                  >> tc.map(lambda d, ss: d / tc.sqrt(ss + 1.0)), [(5, 3)]),
    "an attach of a pair stream's product": (tc.zip_with(lambda a, b: (a, b))
                                             >> tc.attach(tc.map(lambda a, b: a * b) >> tc.sum(axis=0))
                                             >> tc.map(lambda a, b, ab: a * ab + b), [(3, 4), (3, 4)]),
    "an attach as the last stage": (tc.map(tc.tanh) >> tc.attach(tc.max(axis=-1)), [(3, 4)]),
    "drawdown: a scan, then a reduce": (tc.scan(tc.maximum, axis=-1) >> tc.zip_with(tc.sub) >> tc.max(axis=-1),
                                        [(3, 6), (3, 6)]),
    "a reduce, then a reduce of the rows": (tc.map(lambda x: 1.5 + tc.sin(x)) >> tc.sum(axis=-1) >> tc.map(tc.log)
                                            >> tc.sum(), [(3, 4)]),
    "a library pipeline inside a longer one": (tc.map(tc.sin) >> tc.library.softmax(axis=-1) >> tc.map(tc.square),
                                               [(3, 5)]),
    "a library norm, then a map": (tc.library.layer_norm() >> tc.map(tc.exp), [(3, 5), (5,), (5,)]),
    # the stream after the cut is a field of the row's shape beside one of the reduced shape
    "two adjacent attaches (min-max)": (tc.attach(tc.max(axis=-1)) >> tc.attach(tc.map(lambda v, hi: v)
                                                                               >> tc.min(axis=-1))
                                        >> tc.map(lambda v, hi, lo: (v - lo) / (hi - lo)), [(3, 4)]),
    # a tuple sum: each element's gradient is the cotangent of its field, of the reduced shape
    "an attach of a tuple sum (one-pass variance)": (tc.map(lambda v: (v, v * v))
                                                     >> tc.attach(tc.reduce(_PAIR_SUM, identity=(0.0, 0.0), axis=-1))
                                                     >> tc.map(lambda v, w, s, q: (v - s / 5.0)
                                                               * tc.rsqrt(q / 5.0 - (s / 5.0) ** 2 + 1e-5)),
                                                     [(3, 5)]),
    "a mean written as a tuple sum": (tc.map(lambda v: (v, 1.0)) >> tc.reduce(_PAIR_SUM, identity=(0.0, 0.0), axis=-1)
                                      >> tc.map(lambda s, n: s / n), [(3, 5)]),
}


@pytest.mark.parametrize("narrow", [(4, 1), (6,), (1, 6)])
def test_a_tuple_results_field_narrower_than_the_stream_counts_once(narrow, device):
    """``(a * b, b)``: the second field has b's own shape, each element computed once, so its cotangent reaches b
    once, not once for each element of the row it would broadcast along."""
    pipe = tc.zip_with(lambda a, b: (a * b, b))
    a = torch.randn(4, 6, dtype=torch.float64, device=device)
    b = torch.randn(narrow, dtype=torch.float64, device=device)
    g = (torch.randn(4, 6, dtype=torch.float64, device=device), torch.randn(narrow, dtype=torch.float64, device=device))
    ours = _grads(pipe, [a, b], g)
    theirs = _grads(lambda x, y: (x * y, y * 1.0), [a, b], g)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


def test_cross_entropy_inside_a_longer_pipeline_gets_torchs_gradient():
    """Its attaches (the normalizer, then the mean of the row for label smoothing) follow each other."""
    x = torch.randn(3, 5, dtype=torch.float64)
    target = torch.tensor([[1], [0], [4]])
    for reduction in ("mean", "sum", "none"):
        for smoothing in (0.0, 0.1):
            pipe = tc.map(lambda v: v * 2.0) >> tc.library.cross_entropy(reduction=reduction,
                                                                         label_smoothing=smoothing)
            want = torch.nn.functional.cross_entropy(x * 2.0, target[:, 0], reduction=reduction,
                                                     label_smoothing=smoothing)
            g = torch.randn(want.shape, dtype=torch.float64)
            (ours,) = _grads(lambda v: pipe(v, target).reshape(want.shape), [x], g)
            (theirs,) = _grads(lambda v: torch.nn.functional.cross_entropy(
                v * 2.0, target[:, 0], reduction=reduction, label_smoothing=smoothing), [x], g)
            torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(_COMPOSED))
def test_pipelines_that_fold_more_than_once_get_torchs_gradient(name, device):
    pipe, shapes = _COMPOSED[name]
    gen = torch.Generator().manual_seed(len(name))
    inputs = [torch.randn(s, generator=gen, dtype=torch.float64).to(device) for s in shapes]
    outs = pipe(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(device) for o in outs]

    def both(fn):
        leaves = [t.clone().requires_grad_(True) for t in inputs]
        result = fn(*leaves)
        return torch.autograd.grad(result if isinstance(result, tuple) else (result,), leaves, cotangents)
    for a, b in zip(both(pipe), both(lambda *xs: evaluate(pipe.ir, list(xs)))):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_users_softmax_written_as_the_librarys_takes_its_one_kernel_backward():
    """Pipelines are equal by their IR: the user's own two-pass softmax is tc.library.softmax's, and gets its
    backward (one kernel), not the chain of the parts' rules."""
    pipe = (tc.attach(tc.max(axis=-1)) >> tc.map(lambda v, m: tc.exp(v - m)) >> tc.attach(tc.sum(axis=-1))
            >> tc.map(lambda e, s: e / s))
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    assert pipe.explain(x).backward_kernels == 1
    launches, (dx,) = _backward_launches(pipe, x.detach())
    assert launches.triton == 1
    g = torch.ones(4, 7, dtype=torch.float64)
    torch.testing.assert_close(dx, torch.autograd.grad(torch.softmax(x, -1), x, g)[0])


def test_nanmean_shares_the_cotangent_among_the_numbers_as_torch(device):
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 3.0, 4.0], [nan] * 4, [1.0, 2.0, 3.0, 4.0]], dtype=torch.float64, device=device)
    for pipe, theirs in [(tc.nanmean(axis=-1), lambda t: torch.nanmean(t, -1)),
                         (tc.map(tc.sin) >> tc.nanmean(axis=1, keepdim=True),
                          lambda t: torch.nanmean(torch.sin(t), 1, keepdim=True)),
                         (tc.nanmean(), torch.nanmean)]:
        g = torch.randn(theirs(x).shape, dtype=torch.float64, device=device)
        (ours,), (want,) = _grads(pipe, [x], g), _grads(theirs, [x], g)
        torch.testing.assert_close(ours, want, equal_nan=True)  # a row of NaN only: NaN, as torch


# ---- @triton.jit functions ---------------------------------------------------------------------------------------

@pytest.fixture
def jit_functions():
    import triton
    import triton.language as tl

    @triton.jit
    def half_exp(x):
        return tl.exp(x) * 0.5

    @triton.jit
    def mixed(x, y):
        return x / (1.0 + tl.abs(x)) + half_exp(y) * tl.sigmoid(x)
    return half_exp, mixed


def test_a_jit_function_of_builtins_is_differentiated_through_its_body(jit_functions, device):
    _, mixed = jit_functions
    same = (lambda x, y: x / (1.0 + abs(x)) + tc.exp(y) * 0.5 * tc.sigmoid(x))
    x, y = (torch.randn(4, 5, dtype=torch.float64, device=device) for _ in range(2))
    g = torch.randn(4, dtype=torch.float64, device=device)
    ours = _grads(tc.zip_with(mixed) >> tc.sum(axis=-1), [x, y], g)
    theirs = _grads(tc.zip_with(same) >> tc.sum(axis=-1), [x, y], g)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_a_derivative_given_with_vjp_is_the_one_used(jit_clamped, device):
    """The rule replaces the body's: a deliberately different one (twice the cotangent) shows it is taken. (In
    float32: Triton 3.6 cannot compile tl.clamp of float64 for NVIDIA GPUs.)"""
    @tc.vjp(jit_clamped)
    def _(v, y, g):
        return 2.0 * g
    x = torch.randn(6, device=device)
    g = torch.randn(6, device=device)
    (dx,) = _grads(tc.map(jit_clamped), [x], g)
    torch.testing.assert_close(dx, 2.0 * g)


_SCALE: tl.constexpr = 2.0  # a global of _scaled_sin, which a test changes


@triton.jit
def _scaled_sin(x):
    return x * _SCALE + tl.sin(x)


def test_a_scans_backward_follows_the_globals_its_jit_functions_read(device):
    """A scan's backward is derived once per pipeline and kept, under what its @triton.jit functions read now:
    a changed global gives a new derivative, as it gives a new forward."""
    global _SCALE
    pipe = tc.map(_scaled_sin) >> tc.cumprod(axis=-1)
    x = torch.randn(2, 5, dtype=torch.float64, device=device)
    g = torch.randn(2, 5, dtype=torch.float64, device=device)
    try:
        for scale in (2.0, 3.0):
            _SCALE = scale
            (ours,) = _grads(pipe, [x], g)
            (theirs,) = _grads(lambda t: torch.cumprod(t * scale + torch.sin(t), -1), [x], g)
            torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)
    finally:
        _SCALE = 2.0


def test_a_rule_given_after_a_scans_backward_ran_is_the_one_used(device):
    """The body read as builtins first (sin), then a rule given with tc.vjp: the kept backward gives way to it."""
    @triton.jit
    def wavy(v):
        return tl.sin(v) * 1.5
    pipe = tc.map(wavy) >> tc.cumprod(axis=-1)
    x = torch.rand(2, 5, dtype=torch.float64, device=device)
    g = torch.randn(2, 5, dtype=torch.float64, device=device)
    (through_cumprod,) = _grads(lambda t: torch.cumprod(t, -1), [torch.sin(x) * 1.5], g)
    torch.testing.assert_close(_grads(pipe, [x], g)[0], through_cumprod * 1.5 * torch.cos(x))

    @tc.vjp(wavy)
    def _(v, y, gy):
        return gy * 2.0
    torch.testing.assert_close(_grads(pipe, [x], g)[0], through_cumprod * 2.0)


def test_vjp_refuses_what_is_not_a_derivative(jit_clamped):
    with pytest.raises(tc.ArgumentError, match="@triton.jit function"):
        tc.vjp(lambda v: v)
    with pytest.raises(tc.ArgumentError, match="must take 3 arguments"):
        tc.vjp(jit_clamped)(lambda v, g: g)
    with pytest.raises(tc.ArgumentError, match="one share per operand"):
        tc.vjp(jit_clamped)(lambda v, y, g: (g, g))
    with pytest.raises(tc.ArgumentError, match="rule raised ZeroDivisionError"):
        tc.vjp(jit_clamped)(lambda v, y, g: 1 / 0)
    with pytest.raises(UnsupportedError, match="clamped"):  # nothing was registered by the refused rules
        tc.map(jit_clamped)(torch.randn(3).requires_grad_(True))


# ---- what a backward runs ----------------------------------------------------------------------------------------

_RULE_CASES = {  # a pipeline for each rule of autograd.backward.RULES
    "map": tc.map(tc.sin), "sum": tc.map(tc.exp) >> tc.sum(axis=-1), "max": tc.max(axis=0),
    "argmax": tc.argmax(axis=-1), "cumsum": tc.cumsum(axis=-1, reverse=True), "prod": tc.prod(axis=-1),
    "cumprod": tc.cumprod(axis=-1), "cummax": tc.cummax(axis=-1),
}


@pytest.mark.parametrize("name", sorted(_RULE_CASES))
def test_a_rule_says_whether_its_backward_kernels_scan(name):
    """The rule's ``scans`` flag, which decides whether a traced CUDA backward may record its kernels
    (tricomb/runtime/operator.py), agrees with the kernels it derives."""
    from tricomb.autograd import backward
    from tricomb.pipeline.ir import Scan
    from tricomb.runtime.operator import backward_kernels
    pipe = _RULE_CASES[name]
    derived = backward_kernels(pipe.ir, (torch.randn(4, 6, dtype=torch.float64),))
    scans = any(isinstance(s, Scan) for d, _ in derived for s in d.stages)
    assert backward.rule(backward.check(pipe.ir)).scans == scans


def _backward_launches(pipe, *inputs):
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = pipe(*leaves)
    cotangent = torch.ones_like(out)
    torch.autograd.grad(out, [t for t in leaves if t.requires_grad], cotangent)  # builds the backward kernels
    out = pipe(*leaves)
    with count_launches() as launches:
        grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad], cotangent)
    return launches, grads


_KERNEL_CASES = [
    (tc.zip_with(lambda a, b: tc.silu(a) * b), [(6, 5), (6, 5)], 1),  # both gradients, one kernel
    (tc.map(tc.softplus) >> tc.sum(axis=-1), [(6, 5)], 1),
    (tc.sum(axis=-1), [(6, 5)], 0),  # the cotangent expanded: no kernel
    (tc.cumsum(axis=0), [(6, 5)], 1),  # the reverse cumsum
    (tc.zip_with(lambda a, b: a * b), [(6, 5), (5,)], 2),  # a broadcast input: its own kernel, summed in it
    (tc.prod(axis=-1), [(6, 5)], 2),  # the exclusive prefix, then the suffix and the pullback
    # the result read one step back as the exclusive prefix, the reverse affine scan and the pullback
    (tc.cumprod(axis=-1), [(6, 5)], 1),
    (tc.library.linear_recurrence() >> tc.map(lambda h, decay: h), [(6, 5), (6, 5)], 1),
    # a map after the scan: the scan's result recomputed for its pullback (and read as the prefix), exp's
    # cotangent, then the same kernel
    (tc.cumprod(axis=-1) >> tc.map(tc.exp), [(6, 5)], 3),
    # a half type's result is rounded: the exclusive prefix recomputed first
    (tc.cumprod(axis=-1, dtype=torch.float16), [(6, 5)], 2),
    # the prefix's field that no result holds recomputed (alone), then the same kernel
    (_SCALED_SUM, [(6, 5), (6, 5)], 2),
]
_KERNEL_IDS = ["zip_with", "map-sum", "sum", "cumsum", "broadcast", "prod", "cumprod", "recurrence", "cumprod-exp",
               "cumprod-half", "scaled-sum"]


@pytest.mark.parametrize("pipe, shapes, kernels", _KERNEL_CASES, ids=_KERNEL_IDS)
def test_backward_kernel_counts(pipe, shapes, kernels):
    inputs = [torch.randn(s, dtype=torch.float64) for s in shapes]
    launches, _ = _backward_launches(pipe, *inputs)
    assert launches.triton == kernels and launches.torch_ops == [], (launches.triton, launches.torch_ops)


@pytest.mark.parametrize("name", ["zip_with", "map-sum", "sum", "cumsum", "broadcast", "rms_norm", "layer_norm"])
def test_explain_and_source_show_the_backward_kernels(name):
    """explain() with an input requiring grad counts the kernels a backward launches, and source(backward=True)
    holds one module each, each parsing on its own."""
    import ast
    cases = {n: (p, s) for (p, s, _), n in zip(_KERNEL_CASES, _KERNEL_IDS)}
    cases.update({"rms_norm": (tc.library.rms_norm(), [(6, 5), (5,)]),
                  "layer_norm": (tc.library.layer_norm(), [(6, 5), (5,), (5,)])})
    pipe, shapes = cases[name]
    inputs = [torch.randn(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    plan = pipe.explain(*inputs)
    launches, _ = _backward_launches(pipe, *[t.detach() for t in inputs])
    assert plan.backward_kernels == launches.triton
    assert f"backward: {launches.triton} kernel(s)" in str(plan) or launches.triton == 0
    assert pipe.explain(*[t.detach() for t in inputs]).backward_kernels == 0
    if launches.triton:
        modules = pipe.source(*inputs, backward=True).split("# ---- backward kernel ")[1:]
        assert len(modules) == launches.triton
        for module in modules:
            ast.parse(module.split("\n", 1)[1])


def test_explain_counts_the_kernels_of_the_gradients_asked_for():
    """Only the inputs that require grad get a gradient, so explain() counts the kernels of theirs: here the
    weight's alone (one kernel, summed over the rows), where both take two."""
    pipe = tc.zip_with(lambda a, b: a * b) >> tc.sum(axis=-1)
    x = torch.randn(3, 4, dtype=torch.float64)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    out = pipe(x, w)
    with count_launches() as launches:
        torch.autograd.grad(out, w, torch.ones(3, dtype=torch.float64))
    assert pipe.explain(x, w).backward_kernels == launches.triton == 1
    assert pipe.explain(x.requires_grad_(True), w).backward_kernels == 2


def test_explain_says_why_a_pipeline_has_no_backward(jit_clamped):
    """The forward's plan all the same, and the reason a call with grad would raise, word for word."""
    pipe = tc.map(jit_clamped) >> tc.cumsum(axis=-1) >> tc.sum(axis=-1)
    x = torch.randn(4, 6, requires_grad=True)
    plan = pipe.explain(x)
    assert plan.num_kernels == 1 and plan.backward == () and "clamped" in plan.backward_refused
    assert f"backward: none (a call with grad raises UnsupportedError: {plan.backward_refused})" in str(plan)
    with pytest.raises(UnsupportedError) as info:
        pipe(x)
    assert info.value.message == plan.backward_refused
    fine = (tc.map(tc.sin) >> tc.sum(axis=-1)).explain(x)
    assert fine.backward_refused is None and "zip_with" in repr(fine.backward[0])


def test_gradients_have_their_inputs_dtypes_and_shapes(device):
    x = torch.randn(4, 6, device=device, dtype=torch.float16, requires_grad=True)
    w = torch.randn(6, device=device, dtype=torch.float32, requires_grad=True)
    out = tc.zip_with(lambda a, b: a * b + tc.exp(b))(x, w)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert x.grad.dtype == torch.float16 and w.grad.dtype == torch.float32 and w.grad.shape == (6,)
    torch.testing.assert_close(w.grad, (x.float() + torch.exp(w)).sum(0).detach(), rtol=1e-3, atol=1e-3)


def test_only_inputs_that_require_grad_get_one(device):
    x = torch.randn(3, 4, device=device, requires_grad=True)
    y = torch.randn(3, 4, device=device)
    out = tc.zip_with(lambda a, b: a * b)(x, y)
    out.sum().backward()
    assert y.grad is None and torch.equal(x.grad, y)


def test_no_graph_under_no_grad_and_for_inputs_without_grad(device):
    x = torch.randn(5, device=device, requires_grad=True)
    with torch.no_grad():
        assert not tc.map(tc.exp)(x).requires_grad
    assert not tc.map(tc.exp)(x.detach()).requires_grad
    assert tc.map(tc.exp)(x).grad_fn is not None


def test_a_graph_is_recorded_on_every_path():
    """After a call under torch.no_grad() (which prepares a launch and enters the module in the disk index), a
    call in grad mode records a graph, by the same pipeline and by a new one the disk index knows."""
    x = torch.randn(5, requires_grad=True)
    pipe = tc.map(lambda v: v * 3.0 - 1.0)
    with torch.no_grad():
        assert torch.allclose(pipe(x), x.detach() * 3.0 - 1.0)
    for p in (pipe, tc.map(lambda v: v * 3.0 - 1.0)):
        x.grad = None
        p(x).sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))


def test_out_is_refused_when_a_graph_is_recorded():
    """As torch's out= arguments, which do not support automatic differentiation."""
    out, x = torch.empty(5), torch.randn(5, requires_grad=True)
    with count_launches() as launches, pytest.raises(UnsupportedError, match="out="):
        tc.map(tc.exp)(x, out=out)
    assert launches.total == 0
    with torch.no_grad():
        tc.map(tc.exp)(torch.randn(5, requires_grad=True), out=out)


def test_a_tuple_result_takes_a_cotangent_per_field(device):
    x = torch.randn(4, 3, device=device, dtype=torch.float64, requires_grad=True)
    pipe = tc.map(lambda v: (tc.sin(v), v * v))
    s, q = pipe(x)
    (s.sum() * 2).backward()  # the second field has no cotangent
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach()))
    x.grad = None
    s, q = pipe(x)
    (s.sum() + q.sum()).backward()
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) + 2 * x.detach())


def test_an_input_no_result_depends_on_gets_zeros(device):
    """Steps and comparisons pass no gradient: torch's gradient is zeros, not None."""
    x = torch.randn(5, device=device, requires_grad=True)
    tc.map(tc.sign)(x).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    c, a, b = (torch.randn(5, device=device, requires_grad=True) for _ in range(3))
    tc.zip_with(lambda c, a, b: tc.where(c > 0, a, b))(c, a, b).sum().backward()
    assert torch.equal(c.grad, torch.zeros_like(c)) and torch.equal(a.grad, (c > 0).float())


@pytest.mark.parametrize("pipe", [tc.argmax(axis=-1), tc.argmin(), tc.any(axis=0)], ids=["argmax", "argmin", "any"])
def test_results_without_a_gradient_are_allowed(pipe, device):
    x = torch.randn(3, 4, device=device, requires_grad=True)
    out = pipe(x)
    assert not out.requires_grad
    with torch.no_grad():
        assert torch.equal(out, pipe(x))


@pytest.mark.parametrize("pipe, shapes", [
    (tc.zip_with(lambda x, b: x + b) >> tc.sum(axis=-1), [(2, 3), (2, 1)]),  # b broadcasts along the reduced axis
    (tc.zip_with(lambda x, b: x - b) >> tc.mean(), [(2, 3), (2, 1)]),
    (tc.zip_with(lambda a, b: a * b) >> tc.sum(), [(3, 1), (4,)]),  # each gradient reads the other's narrow shape
    (tc.zip_with(lambda a, b: a * 2.0), [(3, 4), (4,)]),  # b gets zeros
    (tc.zip_with(lambda a, b: a * b) >> tc.cumsum(axis=0), [(3, 1), (3, 4)]),
], ids=["sum-along", "mean-all", "narrow", "unused", "cumsum-broadcast"])
def test_broadcast_inputs_get_the_sum_over_what_they_broadcast_along(pipe, shapes, device):
    inputs = [torch.randn(s, dtype=torch.float64, device=device) for s in shapes]
    cotangent = torch.randn_like(pipe(*inputs))
    ours = _grads(pipe, inputs, cotangent)
    theirs = _grads(lambda *xs: evaluate(pipe.ir, list(xs)), inputs, cotangent)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_max_over_a_map_in_half_types_finds_its_elements(dtype, device):
    """The kernel holds the stream in float32 and rounds the max once; the tie test rounds each element alike."""
    x = torch.randn(8, 16, dtype=dtype, device=device, requires_grad=True)
    (tc.map(lambda v: v * 3.0) >> tc.max(axis=1))(x).sum().backward()
    assert not x.grad.isnan().any() and torch.equal(x.grad.float().sum(1), torch.full((8,), 3.0, device=device))


def test_pipelines_that_are_gone_leave_no_entry():
    import gc
    from tricomb.runtime import operator
    before = len(operator._ENTRIES)
    for scale in (0.5, 0.25, 0.125):
        tc.map(lambda a: a * scale)(torch.randn(3, requires_grad=True)).sum().backward()
    gc.collect()
    assert len(operator._ENTRIES) == before


def test_max_shares_ties_evenly_as_amax(device):
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], device=device, requires_grad=True)
    tc.max(axis=1)(x).sum().backward()
    expected = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], device=device)
    torch.testing.assert_close(x.grad, expected)


def test_mean_spreads_over_the_count(device):
    x = torch.randn(3, 8, device=device, requires_grad=True)
    tc.mean(axis=(0, 1))(x).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 1 / 24))


# ---- the library's own backward ------------------------------------------------------------------------------

_F = torch.nn.functional
_LIBRARY = {
    "softmax": (lambda: tc.library.softmax(axis=-1), lambda x: torch.softmax(x, -1), [(5, 9)], 1),
    "softmax axis 0": (lambda: tc.library.softmax(axis=0), lambda x: torch.softmax(x, 0), [(5, 9)], 1),
    "log_softmax": (lambda: tc.library.log_softmax(axis=-1), lambda x: torch.log_softmax(x, -1), [(5, 9)], 1),
    "rms_norm": (lambda: tc.library.rms_norm(eps=1e-6), lambda x, w: _F.rms_norm(x, (9,), w, 1e-6),
                 [(2, 5, 9), (9,)], 1),
    "rms_norm no weight": (lambda: tc.library.rms_norm(weight=False),
                           lambda x: _F.rms_norm(x, (9,), None, 1e-6), [(5, 9)], 1),
    "layer_norm": (lambda: tc.library.layer_norm(), lambda x, w, b: _F.layer_norm(x, (9,), w, b),
                   [(5, 9), (9,), (9,)], 1),
    "layer_norm two axes": (lambda: tc.library.layer_norm(eps=1e-3, bias=False, axis=(-2, -1)),
                            lambda x, w: _F.layer_norm(x, (3, 9), w, None, 1e-3), [(4, 3, 9), (3, 9)], 1),
}


# axis, keepdim, correction, shape: a row with a NaN and a constant row (std's result 0: torch gives it no
# gradient) where the rows are several; the whole array; two with no degree of freedom left
_MOMENTS = [(-1, False, 1, (4, 7)), (None, False, 1, (3, 5)), ((0, 2), True, 0, (3, 4, 5)), (0, False, 1, (1, 6)),
            (-1, True, 2, (5, 2))]


@pytest.mark.parametrize("root", [False, True], ids=["var", "std"])
@pytest.mark.parametrize("axis, keepdim, correction, shape", _MOMENTS)
def test_var_and_std_take_one_kernel_backward_equal_to_torch(root, axis, keepdim, correction, shape):
    pipe = (tc.library.std if root else tc.library.var)(axis=axis, keepdim=keepdim, correction=correction)
    x = torch.randn(shape, dtype=torch.float64)
    if axis not in (None, 0):
        x[0, 0] = float("nan")
        x[-1] = 2.0
    ours, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = pipe(ours)
    g = torch.randn_like(y)
    with count_launches() as launches:
        (got,) = torch.autograd.grad(y, ours, g)
    fn = torch.std if root else torch.var
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (torch's: no degree of freedom left)
        want = fn(theirs, dim=axis, keepdim=keepdim, correction=correction)
    (expected,) = torch.autograd.grad(want, theirs, g)
    assert launches.triton == 1
    torch.testing.assert_close(got, expected, equal_nan=True)


def test_var_of_every_axis_and_of_a_0d_input_has_a_gradient():
    """axis=() reduces every axis, as torch's forward reads it (its gradient is torch's for dim=None); a 0-d
    input's axis 0 is its one element (no degree of freedom left: NaN, as torch)."""
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(tc.library.var(axis=())(x), x)
    torch.testing.assert_close(got, torch.autograd.grad(torch.var(x), x)[0])
    scalar = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(tc.library.std(axis=0)(scalar), scalar)
    assert got.shape == () and torch.isnan(got)


@pytest.mark.parametrize("name", sorted(_LIBRARY))
def test_library_gradients_equal_torch(name, device):
    make, reference, shapes, _ = _LIBRARY[name]
    inputs = [torch.randn(s, dtype=torch.float64, device=device) for s in shapes]
    out = make()(*inputs)
    cotangent = torch.randn_like(out)
    for a, b in zip(_grads(make(), inputs, cotangent), _grads(reference, inputs, cotangent)):
        assert a.shape == b.shape and a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name", sorted(_LIBRARY))
def test_library_backward_kernel_counts(name):
    """One attach kernel for every gradient (a softmax reads the result and the cotangent once; a norm's weight
    and bias gradients are summed over the rows in the kernel of the input's)."""
    make, _, shapes, kernels = _LIBRARY[name]
    launches, _ = _backward_launches(make(), *[torch.randn(s, dtype=torch.float64) for s in shapes])
    assert launches.triton == kernels and launches.torch_ops == [], (launches.triton, launches.torch_ops)


@pytest.mark.parametrize("reduction, kernels", [("mean", 2), ("sum", 1), ("none", 1)])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_gradient_equals_torch(reduction, kernels, smoothing, device):
    """Ignored rows and a 3-d (N, C, L) case; the mean's count of rows not ignored is one more kernel."""
    for shape, axis in (((6, 7), 1), ((3, 5, 4), 1)):
        x = torch.randn(shape, dtype=torch.float64, device=device)
        t = torch.randint(0, shape[1], (shape[0],) + shape[2:], device=device)
        t.view(-1)[::3] = -100
        pipe = tc.library.cross_entropy(reduction=reduction, label_smoothing=smoothing, axis=axis)
        target = t.unsqueeze(axis)
        cotangent = torch.randn_like(pipe(x, target))
        ours = _grads(lambda v: pipe(v, target), [x], cotangent)[0]
        theirs = _grads(lambda v: _F.cross_entropy(v, t, reduction=reduction, label_smoothing=smoothing), [x],
                        cotangent)[0]
        torch.testing.assert_close(ours, theirs, rtol=1e-7, atol=1e-9)
    if device == "cpu":
        launches, _ = _backward_launches(lambda v: pipe(v, target), x)
        assert launches.triton == kernels and launches.torch_ops == [], (launches.triton, launches.torch_ops)


def test_library_gradcheck():
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    w, b = (torch.randn(6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    for pipe, inputs in ((tc.library.softmax(), (x,)), (tc.library.log_softmax(), (x,)),
                         (tc.library.rms_norm(), (x, w)), (tc.library.layer_norm(), (x, w, b))):
        assert torch.autograd.gradcheck(pipe, inputs, eps=1e-6, atol=1e-6, fast_mode=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="low-precision library gradients on the GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(_LIBRARY))
def test_library_gradients_in_low_precision(name, dtype):
    make, reference, shapes, _ = _LIBRARY[name]
    big = [(64 * shapes[0][0], *shapes[0][1:]), *shapes[1:]]  # more rows; the weight and bias as they are
    inputs = [torch.randn(s, device="cuda", dtype=dtype) for s in big]
    out = make()(*inputs)
    cotangent = torch.randn_like(out)
    ours = _grads(make(), inputs, cotangent)
    theirs = _grads(reference, [t.double() for t in inputs], cotangent.double())
    for a, b in zip(ours, theirs):
        assert a.dtype == dtype
        scale = b.abs().max().item()
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * scale)


# ---- refusals ----------------------------------------------------------------------------------------------------

@pytest.fixture
def jit_clamped():
    import triton
    import triton.language as tl

    @triton.jit
    def clamped(v):
        return tl.clamp(v, -1.0, 1.0) * v
    return clamped


def test_a_jit_body_calling_a_method_names_it_in_the_refusal():
    import triton
    import triton.language as tl

    @triton.jit
    def casted(v):
        return v.to(tl.float32) * 2.0
    with pytest.raises(UnsupportedError, match=r"casted: .* the attribute \.to of a value"):
        tc.map(casted)(torch.randn(3, requires_grad=True))


def _refused_before_launch(pipe, *inputs, match: str):
    leaves = [t.requires_grad_(True) for t in inputs]
    with count_launches() as launches, pytest.raises(UnsupportedError, match=match):
        pipe(*leaves)
    assert launches.total == 0


def test_a_jit_function_beyond_the_builtins_is_refused_by_name(jit_clamped):
    _refused_before_launch(tc.map(lambda v: jit_clamped(v) + 1.0), torch.randn(4),
                           match=r"@triton.jit function clamped \(called by .*tl.clamp.*tc.vjp\(clamped\)")


def test_a_refusal_inside_a_part_of_a_composed_pipeline_comes_before_any_launch(jit_clamped):
    """A pipeline cut into parts (an attach) is checked part by part before its forward runs."""
    pipe = tc.attach(tc.sum(axis=-1)) >> tc.map(lambda v, s: jit_clamped(v - s))
    _refused_before_launch(pipe, torch.randn(3, 4), match=r"@triton.jit function clamped")


def test_forward_mode_tangents_are_refused_not_dropped():
    """A dual tensor's tangent would be lost in a kernel (a silently wrong JVP): refused before anything runs,
    after a call without one was prepared too; a plain input inside a dual level still runs."""
    import torch.autograd.forward_ad as forward_ad
    pipe = tc.map(tc.exp) >> tc.sum(axis=-1)
    x = torch.randn(3, 4, dtype=torch.float64)
    pipe(x)
    for grad in (False, True):
        with forward_ad.dual_level(), count_launches() as launches:
            dual = forward_ad.make_dual(x.clone().requires_grad_(grad), torch.ones_like(x))
            with pytest.raises(UnsupportedError, match="forward-mode tangent"):
                pipe(dual)
            torch.testing.assert_close(pipe(x), x.exp().sum(-1))
            with pytest.raises(UnsupportedError, match="out= carries a forward-mode tangent"):
                pipe(x, out=forward_ad.make_dual(torch.empty(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)))
        assert launches.triton == 1


_CONSTANT_OPERANDS = {  # a builtin with a constant operand, whose derivative combines that constant with others
    "pow-constant-exponent": (tc.map(lambda v: v ** 0.7), lambda t: t ** 0.7),
    "pow-constant-base": (tc.map(lambda v: 0.3 ** v), lambda t: 0.3 ** t),
    "pow-integer-base": (tc.map(lambda v: 2 ** v), lambda t: 2 ** t),  # log(2) of an int, in double too
    "norm-3": (tc.library.norm(3.0), lambda t: torch.linalg.vector_norm(t, 3.0)),
}


def test_a_users_builtins_of_constants_stay_as_written():
    """Only derivative rules fold constants: a user's tc.neg(3) beside int32 is an int32 kernel value, and
    tc.exp(1.0) is float32's e (a 0-d float32 tensor in torch), also beside float64."""
    v = torch.tensor([1, -2, 3], dtype=torch.int32)
    got = tc.map(lambda x: x + tc.neg(3))(v)
    assert got.dtype == torch.int32 and torch.equal(got, v - 3)
    got = tc.map(lambda x: x * tc.exp(1.0))(torch.ones(3, dtype=torch.float64))
    off = (got - math.e).abs()
    assert got.dtype == torch.float64 and bool(((off > 1e-9) & (off < 1e-6)).all())  # float32's e, not double's


@pytest.mark.parametrize("name", sorted(_CONSTANT_OPERANDS))
def test_a_derivative_of_constants_is_computed_in_double(name):
    """``b - 1`` and ``log(a)`` for constants a and b are Python numbers (weak scalars, as in torch), not float32
    values of the kernel: a float64 gradient is as exact as torch's."""
    pipe, reference = _CONSTANT_OPERANDS[name]
    x = torch.rand(40, dtype=torch.float64) + 0.5
    ours, theirs = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y = pipe(ours)
    g = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad(y, ours, g)[0],
                               torch.autograd.grad(reference(theirs), theirs, g)[0], rtol=1e-13, atol=0)


def test_a_second_derivative_is_refused():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = tc.map(tc.sin)(x).sum()
    with pytest.raises(UnsupportedError, match="second derivative"):
        torch.autograd.grad(y, x, create_graph=True)
    torch.testing.assert_close(torch.autograd.grad(tc.map(tc.sin)(x).sum(), x)[0], torch.cos(x.detach()))


def test_a_refused_gradient_leaves_the_pipeline_usable(jit_clamped):
    pipe = tc.map(jit_clamped) >> tc.sum(axis=-1)
    x = torch.rand(3, 4)
    with pytest.raises(UnsupportedError):
        pipe(x.clone().requires_grad_(True))
    torch.testing.assert_close(pipe(x), (x.clamp(-1.0, 1.0) * x).sum(-1))


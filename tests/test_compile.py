"""Pipelines as a torch operator: torch.compile(fullgraph=True) sees each as one node, torch.library.opcheck is
clean, sizes change without recompiling, and the eager call keeps its direct path."""
import os
import shutil

import pytest
import torch
import torch._dynamo.testing

import tricomb as tc
from conftest import DEVICES
from tricomb.runtime import operator

_PIPES = {
    "map": (tc.map(tc.softplus), [(5, 7)]),
    "zip_with-broadcast": (tc.zip_with(lambda a, b: tc.silu(a) * b), [(5, 7), (7,)]),
    "sum": (tc.map(tc.square) >> tc.sum(axis=-1), [(5, 7)]),
    "logsumexp": (tc.reduce(tc.logaddexp, axis=0, keepdim=True), [(5, 7)]),
    "cumsum": (tc.cumsum(axis=0, reverse=True), [(5, 7)]),
    "tuple": (tc.map(lambda v: (tc.sin(v), v * v)), [(5, 7)]),
    "softmax": (tc.library.softmax(axis=-1), [(5, 7)]),
    "argmax": (tc.argmax(axis=1), [(5, 7)]),
}


def _inputs(shapes, device, grad=False):
    return [torch.randn(s, device=device, dtype=torch.float64, requires_grad=grad) for s in shapes]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(_PIPES))
def test_opcheck(name):
    pipe, shapes = _PIPES[name]
    grad = name not in ("softmax", "argmax")  # (no derived gradient through attach yet; argmax has none)
    inputs = _inputs(shapes, "cpu", grad)
    key = operator.op_key(pipe)
    torch.library.opcheck(torch.ops.tricomb.pipeline.default, (key, inputs, []))


# Inductor compiles CPU graphs with a C++ compiler, which a fresh machine may lack; there the graphs run through
# AOTAutograd alone (Dynamo's tracing, the fake implementation and the traced backward are the same)
_COMPILER = any(shutil.which(c) for c in (os.environ.get("CXX", ""), "g++", "c++", "clang++") if c)
BACKEND = "inductor" if _COMPILER or torch.cuda.is_available() else "aot_eager"


def _compiled(fn, **kwargs):
    counter = torch._dynamo.testing.CompileCounterWithBackend(BACKEND)
    return torch.compile(fn, backend=counter, fullgraph=True, **kwargs), counter


@pytest.mark.parametrize("device", DEVICES)
def test_fullgraph_matches_eager_with_gradients(device):
    act = tc.zip_with(lambda a, b: tc.silu(a) * b)
    loss = tc.map(tc.softplus) >> tc.sum(axis=-1)
    scan = tc.cumsum(axis=-1)

    def f(x, w, y):
        h = act(x @ w, y)
        return loss(scan(h)).mean()

    compiled, counter = _compiled(f)
    x, w = _inputs([(6, 5), (5, 4)], device, grad=True)
    y = torch.randn(6, 4, device=device, dtype=torch.float64)
    got = compiled(x, w, y)
    got.backward()
    grads = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    want = f(x, w, y)
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grads, (x.grad, w.grad))
    assert counter.frame_count == 1


def test_changing_sizes_does_not_recompile():
    pipe = tc.zip_with(lambda a, b: a * tc.exp(b)) >> tc.sum(axis=-1)
    compiled, counter = _compiled(lambda x, y: pipe(x, y) * 2, dynamic=True)
    for n in (3, 8, 17, 40):
        x, y = _inputs([(n, n + 1), (n + 1,)], "cpu")
        torch.testing.assert_close(compiled(x, y), pipe(x, y) * 2)
    assert counter.frame_count == 1


def test_marked_dynamic_dims_do_not_recompile():
    pipe = tc.library.softmax(axis=-1)
    compiled, counter = _compiled(pipe)
    for n in (4, 9, 30):
        x = torch.randn(n, 6)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), torch.softmax(x, -1))
    assert counter.frame_count == 1


@pytest.mark.parametrize("name", sorted(_PIPES))
def test_every_kind_compiles_without_graph_breaks(name):
    pipe, shapes = _PIPES[name]
    inputs = _inputs(shapes, "cpu")
    compiled, counter = _compiled(pipe)
    got, want = compiled(*inputs), pipe(*inputs)
    torch.testing.assert_close(got, want)
    assert counter.frame_count == 1


def test_named_result_and_out_under_compile():
    x = torch.randn(4, 6)
    values, indices = torch.compile(tc.cummax(axis=1), backend=BACKEND, fullgraph=True)(x)
    ref = torch.cummax(x, 1)
    assert torch.equal(values, ref.values) and torch.equal(indices, ref.indices)
    out = torch.empty(4)
    total = tc.sum(axis=1)
    result = torch.compile(lambda v, o: total(v, out=o), backend=BACKEND, fullgraph=True)(x, out)
    assert result is out or result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, x.sum(1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_shape_error_under_compile_says_what_eager_says(dynamic):
    """A (N,) target beside (N, C) logits: the fake implementation checks what binding checks, so the traced
    call is told to keep the class axis, in tricomb's words (wrapped in torch's error), not a broadcast failure
    inside the library's stages."""
    loss = tc.library.cross_entropy()
    x, target = torch.randn(6, 5), torch.randint(0, 5, (6,))
    with pytest.raises(tc.ShapeError, match=r"target\[:, None\]"):
        loss(x, target)
    compiled, _ = _compiled(lambda a, b: loss(a, b), dynamic=dynamic)
    with pytest.raises(Exception, match=r"ShapeError.*target\[:, None\]"):
        compiled(x, target)


def test_out_with_grad_is_refused_under_compile():
    """As in an eager call (tests/test_autograd.py): out= records no history."""
    exp = tc.map(tc.exp)
    compiled = torch.compile(lambda v, o: exp(v, out=o), backend=BACKEND, fullgraph=True)
    with pytest.raises(Exception, match="out= records no autograd history"):
        compiled(torch.randn(3, requires_grad=True), torch.empty(3))


def test_eager_calls_do_not_take_the_operator(monkeypatch):
    calls = []
    original = operator.call
    monkeypatch.setattr(operator, "call", lambda *a: calls.append(a) or original(*a))
    pipe = tc.map(tc.exp)
    x = torch.randn(8)
    pipe(x)
    pipe(x)
    assert calls == []
    pipe(x.requires_grad_(True))
    assert len(calls) == 1


def test_a_repeated_call_with_grad_reuses_its_prepared_launch(monkeypatch, device):
    """Inside the operator (whose autograd formula runs its forward with grad off) the launch path's fast key
    serves inputs that require grad, so a training step's forward pays no binding or preparing after its first
    call."""
    from tricomb.runtime import launch
    slow = []
    original = launch._first_call
    monkeypatch.setattr(launch, "_first_call", lambda *a: slow.append(a) or original(*a))
    pipe = tc.map(tc.exp) >> tc.sum(axis=-1)
    x = torch.randn(4, 8, device=device, requires_grad=True)
    for _ in range(3):
        y = pipe(x)
        y.sum().backward()
    assert y.grad_fn is not None and len(slow) == 2  # (the forward's first call, and its backward kernel's)
    torch.testing.assert_close(x.grad, 3 * x.detach().exp())


def test_a_small_training_loop_under_compile(device):
    """An MLP block written with tricomb (RMSNorm, SwiGLU, a logsumexp cross-entropy) trained for a few AdamW
    steps, compiled with fullgraph and eager, from the same start: the same losses and weights."""
    norm = tc.library.rms_norm(eps=1e-6)
    swiglu = tc.zip_with(lambda a, b: tc.silu(a) * b)
    logsumexp = tc.reduce(tc.logaddexp, axis=-1)
    picked = tc.zip_with(lambda z, onehot: z * onehot) >> tc.sum(axis=-1)

    def loss_fn(params, x, onehot):
        g, w1, w2, w3 = params
        x = norm(x, g)
        h = swiglu(x @ w1, x @ w2) @ w3
        return (logsumexp(h) - picked(h, onehot)).mean()

    def train(step_fn, steps=3):
        gen = torch.Generator().manual_seed(0)
        params = [(torch.randn(s, generator=gen, dtype=torch.float64) / 4).to(device).requires_grad_(True)
                  for s in ((8,), (8, 16), (8, 16), (16, 5))]
        x = torch.randn(12, 8, generator=gen, dtype=torch.float64).to(device)
        onehot = torch.nn.functional.one_hot(torch.randint(0, 5, (12,), generator=gen), 5).double().to(device)
        opt = torch.optim.AdamW(params, lr=1e-2)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = step_fn(params, x, onehot)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach() for p in params]

    compiled, counter = _compiled(loss_fn)
    eager_losses, eager_params = train(loss_fn)
    compiled_losses, compiled_params = train(compiled)
    assert counter.frame_count == 1
    torch.testing.assert_close(compiled_losses, eager_losses)
    torch.testing.assert_close(compiled_params, eager_params)


# ---- on CUDA: triton_ops, the kernels launched by Inductor's own code ----------------------------------------------

_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="triton_op's kernels run on CUDA tensors only")

# each plan kind at sizes that cross its schedule's choices (a split reduce, a look-back scan, shared rows where
# eager would share them, the reduce over the rows): one graph over symbolic sizes (the opaque operator's: see
# tricomb.runtime.operator._recordable) serves them all, with eager's values
_SIZED = {
    "map": (tc.map(tc.softplus), [(3, 5), (1000, 999), (64, 4096)]),
    "sum-rows": (tc.map(tc.square) >> tc.sum(axis=-1), [(7, 100000), (3, 5), (4096, 33)]),
    "sum-all": (tc.sum(), [(2, 1 << 20), (3, 5), (9, 17)]),
    "cumsum-rows": (tc.cumsum(axis=-1), [(2, 1 << 20), (3, 5), (300, 70)]),
    "softmax": (tc.library.softmax(axis=-1), [(2, 1 << 18), (3, 5), (5000, 300)]),
    "log-softmax-sum": (tc.library.log_softmax(axis=-1) >> tc.sum(axis=-1) >> tc.sum(), [(4, 70000), (3, 5),
                                                                                      (3000, 40)]),
}


@_CUDA
@pytest.mark.parametrize("name", sorted(_SIZED))
def test_cuda_graphs_serve_every_size_without_recompiling(name):
    pipe, shapes = _SIZED[name]
    compiled, counter = _compiled(pipe, dynamic=True)
    for shape in shapes:
        x = torch.randn(shape, device="cuda")
        if name.startswith("cumsum"):
            _assert_prefix_sums_close(compiled(x), pipe(x), x)
        else:
            torch.testing.assert_close(compiled(x), pipe(x), rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 1


def _assert_prefix_sums_close(got, want, x, scale=1.0):
    """Two float32 prefix sums of ``x`` (times ``scale``) agree within a few roundings of each running sum of
    magnitudes: a look-back scan takes each tile's prefix from whichever predecessors have published, so its
    rounding order, and its last bits, differ from one run to the next (docs/numerics.md)."""
    bound = 8 * torch.finfo(torch.float32).eps * x.abs().cumsum(-1) * abs(scale) + 1e-6
    assert bool(((got - want).abs() <= bound).all()), float(((got - want).abs() - bound).max())


@_CUDA
def test_cuda_graphs_launch_the_kernels_in_inductors_code():
    """Inductor sees each kernel: its output code launches the pipeline's kernels, forward and backward, and calls
    no tricomb operator."""
    from torch._inductor.utils import run_and_get_code
    pipe = tc.zip_with(lambda a, b: tc.silu(a) * b) >> tc.sum(axis=-1)
    x = torch.randn(64, 200, device="cuda", requires_grad=True)
    y = torch.randn(200, device="cuda", requires_grad=True)
    compiled = torch.compile(lambda x, y: pipe(x, y).sum(), fullgraph=True)
    result, codes = run_and_get_code(lambda: compiled(x, y).backward())
    code = "\n".join(codes)
    assert "tricomb.pipeline" not in code and "@triton.jit" in code
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    pipe(x2, y2).sum().backward()
    torch.testing.assert_close((x.grad, y.grad), (x2.grad, y2.grad))


@_CUDA
def test_a_cuda_scan_under_compile_runs_through_the_opaque_operator():
    """A scan's launch is not recorded (its look-back fails Inductor's passes): the graph calls the operator."""
    from torch._inductor.utils import run_and_get_code
    pipe = tc.cumsum(axis=-1)
    x = torch.randn(2, 1 << 20, device="cuda")
    compiled = torch.compile(lambda t: pipe(t) * 2, fullgraph=True)
    got, codes = run_and_get_code(compiled, x)
    assert "tricomb.pipeline" in "\n".join(codes)
    _assert_prefix_sums_close(got, pipe(x) * 2, x, scale=2.0)


@_CUDA
def test_opcheck_cuda():
    pipe = tc.zip_with(lambda a, b: a * tc.sin(b)) >> tc.sum(axis=-1)
    x, y = _inputs([(4, 6), (6,)], "cuda", grad=True)
    operator._register_cuda()  # (done by the first traced call)
    torch.library.opcheck(torch.ops.tricomb.pipeline_cuda.default, (operator.op_key(pipe), [x, y], []))
    result = [pipe(x.detach(), y.detach())]
    grads = [torch.randn(4, dtype=torch.float64, device="cuda")]
    torch.library.opcheck(torch.ops.tricomb.pipeline_backward_cuda.default,
                          (operator.op_key(pipe), [0, 1], [x.detach(), y.detach()], result, grads, []))


def test_opcheck_backward():
    pipe = tc.zip_with(lambda a, b: a * tc.sin(b)) >> tc.sum(axis=-1)
    x, y = _inputs([(4, 6), (6,)], "cpu")
    result = [pipe(x, y)]
    grads = [torch.randn(4, dtype=torch.float64)]
    torch.library.opcheck(torch.ops.tricomb.pipeline_backward.default,
                          (operator.op_key(pipe), [0, 1], [x, y], result, grads, []))


_CACHED_RUN = """
import sys, torch, tricomb as tc
from torch._dynamo.utils import counters
pipe = tc.zip_with(lambda a, b: tc.silu(a) * b) >> tc.reduce(tc.logaddexp, axis=-1)
def f(x, y):
    return pipe(x, y).sum()
x = torch.linspace(-2, 2, 30, dtype=torch.float64).reshape(5, 6).requires_grad_(True)
y = torch.linspace(1, 3, 6, dtype=torch.float64).requires_grad_(True)
loss = torch.compile(f, fullgraph=True)(x, y)
loss.backward()
print(repr([loss.item(), x.grad.sum().item(), y.grad.tolist()]))
print(counters["aot_autograd"]["autograd_cache_hit"], file=sys.stderr)
"""


@pytest.mark.skipif(not _COMPILER, reason="Inductor's cache holds graphs Inductor compiled: on the CPU it needs a C++ "
                    "compiler")
def test_a_graph_from_torchs_cache_runs_in_a_new_process(tmp_path):
    """The second process reads the compiled forward and backward from Inductor's cache on disk, without
    tracing the backward: it still finds its pipelines, and gives the first process's numbers."""
    import subprocess
    import sys
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "1", "TRICOMB_CACHE_DIR": str(tmp_path / "tricomb")}
    runs = [subprocess.run([sys.executable, "-c", _CACHED_RUN], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout
    assert runs[1].stderr.strip().splitlines()[-1] != "0"  # the second one was served from the cache


def test_fake_inputs_give_fake_results_of_torchs_shape_and_dtype():
    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake
    with FakeTensorMode():
        x = torch.empty(3, 5, dtype=torch.float16)
        w = torch.empty(5, dtype=torch.float32)
        y = tc.zip_with(lambda a, b: a * b)(x, w)
        s = tc.sum(axis=0)(x)
    assert is_fake(y) and y.shape == (3, 5) and y.dtype == torch.float32
    assert is_fake(s) and s.shape == (5,) and s.dtype == torch.float16


def test_the_constant_marker_is_torchs():
    """A pipeline's key function is marked as torch.compiler.assume_constant_result marks a function, without
    importing torch._dynamo: the two marks must agree."""
    marked = torch.compiler.assume_constant_result(lambda: 0)
    assert set(vars(marked)) == set(vars(tc.map(tc.exp)._key)) == {"_dynamo_marked_constant"}


def test_the_operator_runs_the_pipelines_own_compiled_entries():
    """A call with grad reuses the module an eager call built: the operator's entry holds the pipeline's cache."""
    pipe = tc.map(tc.exp)
    pipe(torch.randn(4))
    pipe(torch.randn(4, requires_grad=True))
    assert operator._ENTRIES[operator.op_key(pipe)].cache is pipe._cache

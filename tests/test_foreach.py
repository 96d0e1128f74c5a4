"""``tc.foreach``: a pipeline of maps and zip_withs over lists of tensors equals a loop of single calls, in one
launch per group of one device and dtypes (as torch groups a foreach op's tensors); numbers and 0-d tensors are
shared, lists of numbers given per tensor; ``out=`` lists are written in place; the AdamW step written with it
(``tc.library.adamw_step``) follows torch.optim.AdamW; and torch.compile records it as one operator."""
import random

import pytest
import torch

import tricomb as tc
from tricomb.testing import count_launches

STEP = tc.zip_with(lambda p, g, lr: p - lr * g)
_TABLE_COPIES = {"_to_copy", "copy_"}  # the launch's tables, made on the host, copied to the device
AXPY = tc.zip_with(lambda x, y, a: (a * x + y, x * y))


def _sizes(count: int, seed: int) -> list[int]:
    """Mixed sizes with empty and one-element tensors among them."""
    rng = random.Random(seed)
    return [rng.choice([0, 1, 2, 3, 17, 64, 100, 1000, 4099]) for _ in range(count)]


def _tensors(sizes, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g).to(device=device, dtype=dtype) for n in sizes]


@pytest.mark.parametrize("count", [1, 2, 17, 500])
def test_foreach_matches_a_loop_of_single_calls_in_one_launch(count, device):
    sizes = _sizes(count, count)
    xs, ys = _tensors(sizes, device), _tensors(sizes, device, seed=1)
    want = [AXPY(x, y, 0.5) for x, y in zip(xs, ys)]
    with count_launches() as launched:
        got = tc.foreach(AXPY)(xs, ys, 0.5)
    assert launched.triton == 1 and set(launched.torch_ops) <= _TABLE_COPIES
    for k in range(2):
        assert len(got[k]) == count
        for g, w in zip(got[k], (pair[k] for pair in want)):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w)


def test_one_launch_per_dtype_group(device):
    dtypes = [torch.float32, torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.float16]
    ps = [torch.randn(n, device=device).to(d) for n, d in zip([5, 300, 1, 6, 40, 0], dtypes)]
    gs = [torch.randn_like(p) for p in ps]
    want = [STEP(p, g, 0.1) for p, g in zip(ps, gs)]
    with count_launches() as launched:
        got = tc.foreach(STEP)(ps, gs, 0.1)
    assert launched.triton == 4  # float32, float16, float64, bfloat16
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), rtol=1e-2 if g.dtype == torch.bfloat16 else 1e-3, atol=1e-3)


def test_in_place_over_the_inputs(device):
    sizes = _sizes(40, 3)
    ps, gs = _tensors(sizes, device), _tensors(sizes, device, seed=2)
    want = [p - 0.25 * g for p, g in zip(ps, gs)]
    grads = [g.clone() for g in gs]
    step = tc.foreach(STEP)
    for _ in range(2):  # the second call reads the table the first one kept
        before = [p.clone() for p in ps]
        assert step(ps, gs, 0.25, out=ps) is ps
        for p, b, g in zip(ps, before, gs):
            torch.testing.assert_close(p, b - 0.25 * g)
    torch.testing.assert_close(want, [p + 0.25 * g for p, g in zip(ps, gs)])
    assert all(torch.equal(a, b) for a, b in zip(gs, grads))


def test_scalars_shared_per_tensor_and_on_the_device(device):
    xs = _tensors([4, 3, 0, 9], device)
    shift = torch.tensor(1.5, device=device)
    got = tc.foreach(tc.zip_with(lambda x, a, s: x * a + s))(xs, [2.0, 3.0, 4.0, 5.0], shift)
    for x, a, g in zip(xs, [2.0, 3.0, 4.0, 5.0], got):
        torch.testing.assert_close(g, x * a + 1.5)
    counts = tc.foreach(tc.zip_with(lambda x, n: x + n))([torch.zeros(3, dtype=torch.int8, device=device)] * 2,
                                                          [1, 300])
    assert counts[0].dtype == torch.int8 and counts[1].tolist() == [44] * 3  # 300 wraps in int8, as torch's


def test_a_list_of_numbers_of_mixed_kinds_promotes_each_as_torch(device):
    """[1, 0.5] meeting int8 tensors: torch keeps int8 for the int and gives float32 for the float."""
    x = torch.arange(4.0, device=device)
    got = tc.foreach(tc.zip_with(lambda p, a: p * a))([x, x, x], [True, 0.5, 3])
    for g, a in zip(got, [True, 0.5, 3]):
        torch.testing.assert_close(g, x * a)
    i8 = [torch.full((3,), 10, dtype=torch.int8, device=device)] * 4
    rates = [1, 0.5, 2, 0.25]
    got = tc.foreach(STEP)(i8, i8, rates)
    for g, lr in zip(got, rates):
        want = i8[0] - lr * i8[0]
        assert g.dtype == want.dtype
        torch.testing.assert_close(g, want)


def test_a_shared_0d_tensor_is_a_block_to_every_builtin(device):
    x = torch.arange(4.0, device=device)
    got = tc.foreach(tc.zip_with(lambda p, b, t: p * b ** t))([x], torch.tensor(0.9, device=device), 3)
    torch.testing.assert_close(got[0], x * 0.9 ** 3)


def test_named_scalars_and_a_parsed_pipeline(device):
    step = tc.foreach(tc.parse("param lr; zip_with (p, g) -> p - lr * g"))
    ps, gs = _tensors([3, 5], device), _tensors([3, 5], device, seed=1)
    got = step(ps, gs, lr=0.5)
    for p, g, r in zip(ps, gs, got):
        torch.testing.assert_close(r, p - 0.5 * g)


def test_strided_tensors_take_a_call_of_their_own(device):
    a = torch.randn(6, 4, device=device)
    xs = [a.t(), torch.randn(5, device=device)]
    got = tc.foreach(tc.map(lambda v: v * 2.0))(xs)
    for x, g in zip(xs, got):
        torch.testing.assert_close(g, x * 2.0)


def test_bad_arguments_are_refused_before_anything_runs(device):
    ps = _tensors([3, 4], device)
    step = tc.foreach(STEP)
    with pytest.raises(tc.ShapeError, match="argument 1 holds 1 items but argument 0 holds 2"):
        step(ps, ps[:1], 0.1)
    with pytest.raises(tc.ShapeError, match="must be 0-d"):
        step(ps, ps, torch.ones(2, device=device))
    with pytest.raises(tc.ArgumentError, match="at least one list of tensors"):
        tc.foreach(tc.map(tc.exp))(2.0)
    with pytest.raises(tc.ArityError, match="foreach takes 3 arguments"):
        step(ps, ps)
    with pytest.raises(tc.ArgumentError, match="argument 1 holds NoneType at position 1 among tensors"):
        step(ps, [ps[0], None], 0.1)
    with pytest.raises(tc.UnsupportedError, match="stage 0 is a reduce"):
        tc.foreach(tc.sum())
    with pytest.raises(tc.ArgumentError, match="out must be a list of 2 tensors"):
        step(ps, ps, 0.1, out=ps[:1])
    kept = [p.clone() for p in ps]
    base = torch.zeros(10, device=device)
    with pytest.raises(tc.AliasError, match=r"out\[0\]\[0\] and the tensor of input list 0 there overlap"):
        step([base[:4]], [base[:4]], 0.1, out=[base[1:5]])
    with pytest.raises(tc.AliasError, match="position 1 overlaps one at position 0, and one of them is written"):
        step([base[:4], base[4:8]], [base[5:9], base[:4]], 0.1, out=[base[:4], base[4:8]])
    shared = torch.ones(4, device=device)
    assert len(step([shared, shared], [shared, shared], 0.5)) == 2  # (read at two positions, written at none)
    assert all(torch.equal(p, k) for p, k in zip(ps, kept))
    with pytest.raises(tc.UnsupportedError, match="no autograd history"):
        step([torch.ones(2, device=device, requires_grad=True)], [torch.ones(2, device=device)], 0.1)


def test_a_repeat_call_with_other_tensors_is_checked_again(device):
    """The launches kept for a call's tensors serve only a call of the same addresses, dtypes and shapes."""
    step = tc.foreach(tc.zip_with(lambda a, b: a + b))
    a, b = torch.arange(4.0, device=device), torch.arange(4.0, device=device) * 10
    out = torch.zeros(4, device=device)
    step([a], [b], out=[out])
    step([a], [b[:1]], out=[out])  # another shape at the same address: broadcast, as a call of the pipeline
    torch.testing.assert_close(out, a + b[0])
    buffer = torch.zeros(8, device=device)
    step([a], [b], out=[buffer[:4]])
    with pytest.raises(tc.ShapeError):
        step([a], [b], out=[buffer[:2]])
    assert buffer[4:].tolist() == [0.0] * 4
    shift = tc.foreach(tc.zip_with(lambda p, s: p + s))
    p1, p2 = torch.ones(4, device=device), torch.ones(4, device=device)
    shift([p1, p2], torch.tensor(5.0, device=device), out=[p1, p2])
    with pytest.raises(tc.AliasError, match="overlaps a tensor given once for every position"):
        shift([p1, p2], p1[0], out=[p1, p2])
    ints = [torch.tensor([1, 2], dtype=torch.int32, device=device)]
    assert step(ints, ints, out=[torch.empty(2, dtype=torch.int32, device=device)])[0].dtype == torch.int32
    old = torch.get_default_dtype()
    scale = tc.foreach(tc.zip_with(lambda x, s: x * s))
    try:
        assert scale(ints, 2.5)[0].dtype == torch.float32
        torch.set_default_dtype(torch.float64)
        assert scale(ints, 2.5)[0].dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


def test_a_repeat_call_tells_numbers_and_arguments_apart(device):
    """Kept launches are found by values exactly (-0.0 is not 0.0) and by the arguments' forms."""
    divide = tc.foreach(tc.zip_with(lambda x, w: x / w))
    x, out = [torch.ones(3, device=device)], [torch.empty(3, device=device)]
    divide(x, [0.0], out=out)
    divide(x, [-0.0], out=out)
    assert out[0].tolist() == [-float("inf")] * 3
    add = tc.foreach(tc.zip_with(lambda p, s: p + s))
    p, o, numbers = [torch.zeros(3, device=device)], [torch.empty(3, device=device)], torch.arange(3.0, device=device)
    add(p, numbers[0], out=o)
    with pytest.raises(tc.ShapeError, match="must be 0-d"):
        add(p, numbers, out=o)  # (the same address as the 0-d tensor before)
    with pytest.raises(tc.ArgumentError, match="out must be a list of 1 tensors"):
        add(p, numbers[0], out=(o,))


def test_lazy_negations_are_refused_and_interleaved_strided_outs_taken(device):
    negated = torch.tensor([1 + 2j], device=device).conj().imag  # (-2, held as 2 with a negation bit)
    with pytest.raises(tc.DTypeError, match="lazy negation"):
        tc.foreach(tc.zip_with(lambda a, b: a + b))([negated], [torch.zeros(1, device=device)])
    weights = torch.zeros(3, 4, device=device)
    halves = [weights[:, :2], weights[:, 2:]]  # (their spans interleave; no element is shared)
    tc.foreach(STEP)(halves, [torch.ones(3, 2, device=device)] * 2, 0.5, out=halves)
    assert weights.tolist() == [[-0.5] * 4] * 3


def test_every_written_tensor_is_checked_against_the_whole_call(device):
    step = tc.foreach(tc.zip_with(lambda a, b: a + b))
    base = torch.zeros(4, device=device)
    halves = base.view(torch.float16)  # (another dtype group over the same memory)
    with pytest.raises(tc.AliasError, match="overlaps one at position"):
        step([base, halves], [torch.ones(4, device=device), torch.zeros(8, dtype=torch.float16, device=device)],
             out=[base, torch.empty(8, dtype=torch.float16, device=device)])
    numbers = torch.arange(8.0, device=device)
    strided = torch.full((8,), 100.0, device=device)[::2]
    with pytest.raises(tc.AliasError, match="overlaps one at position"):  # (position 0 is a call of its own)
        step([strided, numbers[:4]], [strided, numbers[:4]], out=[numbers[0::2], torch.empty(4, device=device)])
    pair = tc.foreach(tc.zip_with(lambda a, b: (a + b, a - b)))
    x, y, o = (torch.randn(4, device=device) for _ in range(3))
    with pytest.raises(tc.AliasError, match="overlaps one at position 0"):
        pair([x], [y], out=([o], [o]))
    with pytest.raises(tc.DeviceError, match="position 0"):
        step([torch.ones(3, device=device)], [torch.ones(3, device="meta")])


def test_adamw_step_follows_torch(device):
    torch.manual_seed(0)
    sizes = [5, 1, 300, 17, 0, 64, 4099]
    params = _tensors(sizes, device)
    reference = [p.clone().requires_grad_() for p in params]
    exp_avgs = [torch.zeros_like(p) for p in params]
    exp_avg_sqs = [torch.zeros_like(p) for p in params]
    optimizer = torch.optim.AdamW(reference, lr=1e-2, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.1, foreach=False)
    for step in range(1, 11):
        grads = [torch.randn_like(p) for p in params]
        for r, g in zip(reference, grads):
            r.grad = g.clone()
        optimizer.step()
        tc.library.adamw_step(params, grads, exp_avgs, exp_avg_sqs, lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-7,
                              weight_decay=0.1, step=step)
    for p, r in zip(params, reference):
        torch.testing.assert_close(p, r.detach(), rtol=1e-5, atol=1e-6)
    for m, r in zip(exp_avgs, reference):
        torch.testing.assert_close(m, optimizer.state[r]["exp_avg"], rtol=1e-5, atol=1e-6)


def test_a_call_refused_by_a_later_group_writes_nothing(device):
    """Every group's launch is made and checked before any runs: a dtype refused at the second group leaves the
    first group's tensors as they were (a retried step is not applied twice)."""
    params = [torch.randn(4, device=device), torch.randn(4, device=device, dtype=torch.float64)]
    grads = [torch.randn_like(p) for p in params]
    moments = [torch.zeros_like(p) for p in params]
    squares = [torch.zeros(4, device=device), torch.zeros(4, device=device)]  # the second's dtype is wrong
    kept = [p.clone() for p in params + moments]
    with pytest.raises(tc.DTypeError):
        tc.library.adamw_step(params, grads, moments, squares, lr=0.1, step=1)
    assert all(torch.equal(a, b) for a, b in zip(params + moments, kept))
    strided = torch.randn(4, 2, device=device)[:, 0]
    with pytest.raises(tc.DTypeError):
        tc.foreach(STEP)([params[0], strided], [grads[0], strided], 0.1,
                         out=[params[0], torch.empty(4, device=device, dtype=torch.int32)])
    assert torch.equal(params[0], kept[0])


def test_writes_in_place_are_seen_by_autograd(device):
    """A tensor written through out= has a new version, so a backward that saved it raises as torch's would."""
    w = torch.randn(3, device=device, requires_grad=True)
    b = torch.ones(3, device=device)
    loss = (w * b).sum()
    tc.foreach(STEP)([b], [b], 0.5, out=[b])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    loss = (w * b).sum()
    STEP(b, b, 0.5, out=b)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_shared_tensors_get_the_checks_list_tensors_get(device):
    ps = [torch.ones(3, device=device)]
    with pytest.raises(tc.DTypeError, match="argument 2 has a lazy negation"):
        tc.foreach(STEP)(ps, ps, torch._neg_view(torch.tensor(0.5, device=device)))
    with pytest.raises(tc.UnsupportedError, match="no autograd history"):
        tc.foreach(STEP)(ps, ps, torch.tensor(0.5, device=device, requires_grad=True))
    leaf = torch.ones(3, device=device, requires_grad=True)
    with pytest.raises(tc.UnsupportedError, match="no autograd history"):
        tc.foreach(STEP)(ps, ps, 0.5, out=[leaf])
    assert torch.equal(leaf.detach(), torch.ones(3, device=device))


def test_adamw_step_takes_a_step_tensor_and_refuses_step_0(device):
    params, grads = _tensors([3, 7], device), _tensors([3, 7], device, seed=1)
    moments = [[torch.zeros_like(p) for p in params] for _ in range(2)]
    reference = [p.clone() for p in params]
    tc.library.adamw_step(params, grads, *moments, lr=1e-2, step=torch.tensor(1, device=device))
    again = [p.clone() for p in reference]
    tc.library.adamw_step(again, grads, *[[torch.zeros_like(p) for p in again] for _ in range(2)], lr=1e-2, step=1)
    torch.testing.assert_close(params, again)
    for step in (0, 0.0, 0.5, 2 ** 63):
        with pytest.raises(tc.ArgumentError, match=f"step={step}: the step's number counts from 1"):
            tc.library.adamw_step(params, grads, *moments, lr=1e-2, step=step)
    with pytest.raises(tc.ArgumentError, match="lr='0.1': give a number"):
        tc.library.adamw_step(params, grads, *moments, lr="0.1", step=1)


def test_torch_compile_records_foreach_as_one_operator(device):
    ps, gs = _tensors([5, 1, 30], device), _tensors([5, 1, 30], device, seed=1)
    step = tc.foreach(STEP)
    new = torch.compile(lambda p, g, lr: step(p, g, lr), backend="aot_eager", fullgraph=True)(ps, gs, 0.5)
    for p, g, r in zip(ps, gs, new):
        torch.testing.assert_close(r, p - 0.5 * g)
    want = [p - 0.5 * g for p, g in zip(ps, gs)]
    torch.compile(lambda p, g, lr: step(p, g, lr, out=p), backend="aot_eager", fullgraph=True)(ps, gs, 0.5)
    torch.testing.assert_close(ps, want)
    changing = torch.compile(lambda p, g, lr: step(p, g, lr), backend="aot_eager", fullgraph=True)
    for lr in (0.1, 0.2, 0.3):  # (a new value may reach the trace as a symbol)
        torch.testing.assert_close(changing(ps, gs, lr), [p - lr * g for p, g in zip(ps, gs)])
    moments = [torch.zeros_like(p) for p in ps]

    def adamw(p, g, m, v, lr, step):
        tc.library.adamw_step(p, g, m, v, lr=lr, step=step)
    compiled = torch.compile(adamw, backend="aot_eager", fullgraph=True)
    squares = [torch.zeros_like(p) for p in ps]
    compiled(ps, gs, moments, squares, 1e-3, 1)
    assert all(torch.isfinite(p).all() for p in ps)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_cuda_graph_replays_foreach():
    ps = _tensors([100, 3, 5000], "cuda")
    gs = _tensors([100, 3, 5000], "cuda", seed=1)
    lr = torch.tensor(0.5, device="cuda")  # on the device: a new value without recapturing
    step = tc.foreach(STEP)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step(ps, gs, lr, out=ps)  # warm up: compile, and keep the table
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(ps, gs, lr, out=ps)
    before = [p.clone() for p in ps]
    lr.fill_(0.25)
    graph.replay()
    torch.cuda.synchronize()
    for p, b, g in zip(ps, before, gs):
        torch.testing.assert_close(p, b - 0.25 * g)

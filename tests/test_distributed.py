"""``tricomb.distributed``: a pipeline over inputs sharded along the axis its reduce, scan or attach combines
equals the pipeline on the whole tensor, for 2 and 4 processes (gloo, on the CPU), with even and uneven shards
and a rank whose shard is empty; through DTensors, with the placements a DTensor user expects; and gradients
through the gathers. Each layout is one group of processes that runs every case and reports each failure."""
import math
import os
import tempfile
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tricomb as tc

LAYOUTS = {  # name -> each rank's length along the sharded axis
    "2 even": [6, 6],
    "2 uneven": [7, 2],
    "4 with an empty rank": [3, 0, 5, 1],
}


def _cases():
    """name -> (pipeline, inputs built from the whole length, whether the result keeps the sharded axis)."""
    def logits(n):
        return (torch.randn(4, n), torch.randint(0, n, (4, 1)).masked_fill(torch.tensor([[False], [True],
                                                                                          [False], [False]]), -100))
    return {
        "sum": (tc.parse("sum(axis=-1)"), lambda n: (torch.randn(3, n),), False),
        "max": (tc.parse("max(axis=-1)"), lambda n: (torch.randn(3, n),), False),
        "max with NaN": (tc.parse("max(axis=-1)"), lambda n: (torch.randn(3, n).masked_fill(torch.arange(n) == n - 1,
                                                                                             math.nan),), False),
        "rms_norm": (tc.library.rms_norm(), lambda n: (torch.randn(3, n), torch.randn(n)), True),
        "mean over both axes": (tc.parse("mean"), lambda n: (torch.randn(3, n),), False),
        "float16 mean past float16's range in sum": (tc.parse("mean(axis=-1)"),
                                                     lambda n: (torch.full((2, n), 30000.0, dtype=torch.float16),),
                                                     False),
        "argmax with ties": (tc.parse("argmax(axis=-1)"), lambda n: (torch.randint(0, 3, (3, n)).float(),), False),
        "Welford variance": (tc.library.var(axis=-1), lambda n: (torch.randn(3, n) + 5,), False),
        "cumsum": (tc.parse("cumsum"), lambda n: (torch.randn(3, n),), True),
        "exclusive reversed cumsum": (tc.scan(tc.add, reverse=True, exclusive=True), lambda n: (torch.randn(3, n),),
                                      True),
        "cummax with indices": (tc.parse("cummax"), lambda n: (torch.randint(0, 4, (3, n)).float(),), True),
        "reversed cummin with indices": (tc.parse("cummin(reverse=True)"),
                                         lambda n: (torch.randint(0, 4, (3, n)).float(),), True),
        "linear recurrence": (tc.library.linear_recurrence(), lambda n: (torch.randn(3, n), torch.rand(3, n)), True),
        "reversed linear recurrence": (tc.library.linear_recurrence(reverse=True),
                                       lambda n: (torch.randn(3, n), torch.rand(3, n)), True),
        "scan then reduce": (tc.parse("scan maximum | zip_with sub | max(axis=-1)"),
                             lambda n: (torch.randn(3, n), torch.randn(3, n)), False),
        "softmax": (tc.library.softmax(), lambda n: (torch.randn(3, n),), True),
        "layer_norm with a sharded weight": (tc.library.layer_norm(),
                                             lambda n: (torch.randn(3, n), torch.randn(n), torch.randn(n)), True),
        "positions": (tc.map(lambda v: v * tc.index(-1)), lambda n: (torch.randn(3, n),), True),
        "a scan keeping its left operand": (tc.scan(lambda a, b: a), lambda n: (torch.randn(3, n),),
                                            True),
        "argmax of a vector": (tc.parse("argmax"), lambda n: (torch.randn(n),), False),
        "mean of a stream grown by a later input": (tc.map(lambda a: 2 * a) >> tc.zip_with(lambda a, b: a + b) >>
                                                    tc.mean(), lambda n: (torch.randn(1, n), torch.randn(3, n)),
                                                    False),
        "cross-entropy over a sharded vocabulary": (tc.library.cross_entropy(), logits, False),
    }


def _shard(t: torch.Tensor, axis: int, start: int, length: int, rank: int) -> torch.Tensor:
    """``t``'s part along ``axis`` of the stream (of ``rank`` dimensions), or ``t`` where it broadcasts there."""
    at = axis - (rank - t.dim())
    if at < 0 or t.shape[at] == 1:
        return t
    return t.narrow(at, start, length)


def _check(pipe, inputs, sizes, keeps_axis, index):
    start, length = sum(sizes[:index]), sizes[index]
    rank = max(t.dim() for t in inputs)
    want = pipe(*inputs)
    local = [_shard(t, rank - 1, start, length, rank) for t in inputs]
    got = tc.distributed.call(pipe, *local, axis=-1)
    for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        torch.testing.assert_close(g, w.narrow(-1, start, length) if keeps_axis else w, equal_nan=True)


def _check_gradient(pipe, make, sizes, keeps_axis, index):
    """The shard's gradient equals its part of the whole tensor's (float64)."""
    start, length = sum(sizes[:index]), sizes[index]
    inputs = [t.double().requires_grad_() for t in make(sum(sizes))]
    out = pipe(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    dy = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    want = torch.autograd.grad(out, inputs, dy)
    local = [t.detach().narrow(-1, start, length).requires_grad_() for t in inputs]
    got = tc.distributed.call(pipe, *local, axis=-1)
    got = got[0] if isinstance(got, tuple) else got
    grads = torch.autograd.grad(got, local, dy.narrow(-1, start, length) if keeps_axis else dy)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w.narrow(-1, start, length))


def _check_broadcast_gradient(sizes, index):
    """A broadcast input's gradient is this rank's share: the shares sum to the whole tensor's, with no NaN from an
    empty shard's stand-in."""
    pipe = tc.zip_with(lambda a, b: tc.log(a) * b) >> tc.sum(axis=-1)
    x = torch.rand(3, sum(sizes), dtype=torch.float64) + 0.5
    w = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    want, = torch.autograd.grad(pipe(x, w).sum(), w)
    start = sum(sizes[:index])
    share, = torch.autograd.grad(tc.distributed.call(pipe, x[:, start:start + sizes[index]], w).sum(), w)
    dist.all_reduce(share)
    torch.testing.assert_close(share, want)


def _check_dtensors(mesh, world):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    x = torch.randn(3, 2 * world + 1, generator=torch.Generator().manual_seed(3))
    sharded = distribute_tensor(x, mesh, [Shard(1)])
    for pipe, placement in ((tc.parse("cumsum"), Shard(1)), (tc.parse("sum(axis=-1)"), Replicate()),
                            (tc.library.softmax(), Shard(1)), (tc.parse("map exp"), Shard(1))):
        got, want = pipe(sharded), pipe(x)
        assert got.placements == (placement,), (str(pipe), got.placements)
        torch.testing.assert_close(got.full_tensor(), want)
    rows = distribute_tensor(x, mesh, [Shard(0)])  # (sharded along an axis the scan does not combine)
    torch.testing.assert_close(tc.parse("cumsum")(rows).full_tensor(), torch.cumsum(x, -1))
    y = torch.randn(3, 2 * world + 1, generator=torch.Generator().manual_seed(4))
    mixed = tc.zip_with(lambda a, b: a * b) >> tc.cumsum()  # (a replicated input, whole along the sharded axis)
    torch.testing.assert_close(mixed(sharded, distribute_tensor(y, mesh, [Replicate()])).full_tensor(),
                               torch.cumsum(x * y, -1))
    w = torch.randn(2 * world + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    xs = distribute_tensor(x.double(), mesh, [Shard(0)]).requires_grad_()
    ws = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
    tc.library.layer_norm(bias=False)(xs, ws).sum().backward()
    wf = w.clone().requires_grad_()
    tc.library.layer_norm(bias=False)(x.double(), wf).sum().backward()
    torch.testing.assert_close(ws.grad.full_tensor(), wf.grad)  # (a Partial gradient, summed)


def _check_collectives(sizes, index):
    """One collective per fold along the sharded axis (the lengths given): an all_reduce for a sum, an all_gather
    for every other fold; a softmax's two attaches are one."""
    from tricomb.distributed import run
    x = torch.randn(3, sizes[index])
    calls = []
    real = run.dist.all_gather, run.dist.all_reduce
    run.dist.all_gather = lambda *a, **k: (calls.append("gather"), real[0](*a, **k))[1]
    run.dist.all_reduce = lambda *a, **k: (calls.append("reduce"), real[1](*a, **k))[1]
    try:
        for pipe, want in ((tc.library.softmax(), ["gather"]), (tc.parse("cumsum"), ["gather"]),
                           (tc.parse("argmax(axis=-1)"), ["gather"]), (tc.parse("sum(axis=-1)"), ["reduce"]),
                           (tc.library.rms_norm(weight=False), ["reduce"]), (tc.parse("max"), ["gather"]),
                           (tc.parse("scan maximum | zip_with sub | max(axis=-1)"), ["gather", "gather"]),
                           (tc.parse("map exp"), [])):
            calls.clear()
            tc.distributed.call(pipe, *([x] * pipe.ir.num_inputs), sizes=sizes)
            assert calls == want, (str(pipe), calls)
    finally:
        run.dist.all_gather, run.dist.all_reduce = real


def _check_all_empty(world):
    for pipe, want in ((tc.parse("sum(axis=-1)"), torch.zeros(2)), (tc.parse("cumsum"), torch.zeros(2, 0))):
        torch.testing.assert_close(tc.distributed.call(pipe, torch.zeros(2, 0), sizes=[0] * world), want)


def _check_errors(sizes, index):
    x = torch.randn(2, sizes[index])
    with pytest.raises(tc.ArgumentError, match="axis=2 is no axis"):
        tc.distributed.call(tc.parse("cumsum"), x, axis=2)
    with pytest.raises(tc.ArgumentError, match="sizes= gives 1 lengths"):
        tc.distributed.call(tc.parse("cumsum"), x, sizes=[sizes[index]])
    with pytest.raises(tc.UnsupportedError, match="nanmean"):
        tc.distributed.call(tc.parse("nanmean(axis=-1)"), x, sizes=sizes)
    with pytest.raises(tc.UnsupportedError, match="out= is not taken"):
        tc.distributed.call(tc.parse("cumsum"), x, sizes=sizes, out=x)
    with pytest.raises(tc.ArgumentError, match="elements along the sharded axis|inputs were refused"):  # (all do)
        tc.distributed.call(tc.zip_with(tc.add), x, torch.ones(2, sum(sizes) + 2))


def _worker(index, sizes, init, report):
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=index, world_size=len(sizes))
    import tricomb.distributed  # noqa: F401 (tc.distributed)
    from torch.distributed.device_mesh import init_device_mesh
    failures = []
    checks = [(name, lambda p=pipe, m=make, k=keeps: _check(p, m(sum(sizes)), sizes, k, index))
              for name, (pipe, make, keeps) in _cases().items()]
    checks += [(f"gradient of {name}", lambda p=pipe, m=make, k=keeps: _check_gradient(p, m, sizes, k, index))
               for name, (pipe, make, keeps) in _cases().items()
               if name in ("sum", "cumsum", "reversed linear recurrence", "softmax", "scan then reduce", "rms_norm")]
    checks += [("errors", lambda: _check_errors(sizes, index)), ("collectives", lambda: _check_collectives(sizes, index)),
               ("a broadcast input's gradient", lambda: _check_broadcast_gradient(sizes, index)),
               ("every shard empty", lambda: _check_all_empty(len(sizes)))]
    checks += [("DTensor", lambda: _check_dtensors(init_device_mesh("cpu", (len(sizes),)), len(sizes)))]
    for name, check in checks:
        torch.manual_seed(0)  # (every rank builds the same whole inputs)
        try:
            check()
        except Exception:
            failures.append(f"rank {index}, {name}:\n{traceback.format_exc(limit=4)}")
    with open(os.path.join(report, f"{index}.txt"), "w") as f:
        f.write("\n".join(failures))
    dist.destroy_process_group()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_sharded_pipelines_match_the_whole(layout, tmp_path):
    sizes = LAYOUTS[layout]
    init = tempfile.mktemp(dir=tmp_path)
    mp.spawn(_worker, args=(sizes, init, str(tmp_path)), nprocs=len(sizes))
    failures = [(tmp_path / f"{r}.txt").read_text() for r in range(len(sizes))]
    assert not any(failures), "\n".join(f for f in failures if f)


def test_no_process_group_is_a_clear_error():
    import tricomb.distributed as td
    if dist.is_initialized():
        pytest.skip("a process group is initialized here")
    with pytest.raises(tc.ArgumentError, match="init_process_group"):
        td.call(tc.parse("cumsum"), torch.ones(3))


def test_chunk_sizes_are_dtensors():
    from tricomb.distributed import _chunk_sizes
    for total in range(0, 12):
        for world in (1, 2, 3, 4):
            assert list(_chunk_sizes(total, world)) == [c.shape[0] for c in torch.arange(total).chunk(world)] + \
                [0] * (world - len(torch.arange(total).chunk(world))), (total, world)

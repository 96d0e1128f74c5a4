"""Fields summed over the rows in the kernel of a pipeline of attaches (``PipelineIR.column_sums``), what the
norms' backward computes a weight's and a bias's gradients with.

Grouped by what they check: the sums against torch's (every plan: rows held in one tile, rows swept, one
program or many in one group or several), one launch, the same bits run after run, the norms' backward as one
kernel, and the refusals."""
import dataclasses

import pytest
import torch

import tricomb as tc
from tricomb.api import Pipeline
from tricomb.errors import UnsupportedError
from tricomb.lower.schedule import schedule_attach
from tricomb.testing import schedule_overrides

from conftest import one_launch

# x, its row's mean of squares, and the cotangent: (x * ms, g * x * ms, g), the last two summed over the rows
STREAM = (tc.zip_with(lambda x, g: (x, g)) >> tc.attach(tc.map(lambda x, g: x * x) >> tc.mean(axis=-1))
          >> tc.map(lambda x, g, ms: (x * ms, g * x * ms, g)))

# the row in one tile; swept in tiles of 8 (2 rows a tile); one row a tile over 37 programs (three groups of
# the partials' first fold); one program for every row; held rows with three row tiles' loads in flight
# (software pipelining on the GPU, more tiles a program than stages)
PLANS = [{}, {"BLOCK_K": 8, "BLOCK_M": 2}, {"BLOCK_M": 1, "PROGRAMS": 37}, {"BLOCK_K": 8, "PROGRAMS": 1},
         {"BLOCK_M": 1, "PROGRAMS": 3, "ROW_STAGES": 3}]
PLAN_IDS = ["whole-row", "sweeps", "37-programs", "one-program", "pipelined"]
SHAPES = [(50, 20), (1, 7), (130, 33), (2, 3, 17), (0, 9), (6, 0)]


def _summed(pipe, fields) -> Pipeline:
    return Pipeline(dataclasses.replace(pipe.ir, column_sums=fields))


def _reference(x: torch.Tensor, g: torch.Tensor, fields) -> list[torch.Tensor]:
    ms = (x * x).mean(-1, keepdim=True)
    out = [x * ms, g * x * ms, g]
    kept = list(range(x.dim() - 1))
    return [o.sum(kept, keepdim=True) if j in fields and kept else o for j, o in enumerate(out)]


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_sums_are_torch_sums_over_the_rows(shape, plan, device):
    """Each summed field has size 1 along the kept axes and torch's sum there; the other fields are stored as
    without the sums (float64: the kernel's order of summation is within 1e-12 of torch's)."""
    x = torch.randn(shape, dtype=torch.float64, device=device)
    g = torch.randn(shape, dtype=torch.float64, device=device)
    with schedule_overrides(**plan):
        got = _summed(STREAM, (1, 2))(x, g)
    for k, (a, b) in enumerate(zip(got, _reference(x, g, (1, 2)))):
        assert a.shape == b.shape and a.dtype == b.dtype, (k, a.shape, b.shape)
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("plan", PLANS[:2], ids=PLAN_IDS[:2])
def test_every_field_summed_and_a_strided_input(plan, device):
    """All fields summed (nothing stored element by element), and the input read through a transposed view."""
    x = torch.randn(40, 24, dtype=torch.float64, device=device).t()
    g = torch.randn(24, 40, dtype=torch.float64, device=device)
    with schedule_overrides(**plan):
        got = _summed(STREAM, (0, 1, 2))(x, g)
    for a, b in zip(got, _reference(x, g, (0, 1, 2))):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("weight_shape", [(20,), (1, 20), (30, 20)], ids=["row", "row-2d", "full"])
def test_an_input_constant_along_the_rows_is_read_once_a_program(weight_shape, plan, device):
    """A weight broadcast along the rows (loaded once by each program stepping through row tiles) and one that
    is not give the same sums as torch."""
    pipe = (tc.zip_with(lambda x, w: (x, x * w)) >> tc.attach(tc.map(lambda x, h: x * h) >> tc.sum(axis=-1))
            >> tc.map(lambda x, h, s: (h * s, x * h)))
    x = torch.randn(30, 20, dtype=torch.float64, device=device)
    w = torch.randn(weight_shape, dtype=torch.float64, device=device)
    with schedule_overrides(**plan):
        got = _summed(pipe, (1,))(x, w)
    h = x * w
    s = (x * h).sum(-1, keepdim=True)
    torch.testing.assert_close(got[0], h * s, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], (x * h).sum(0, keepdim=True), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_fields_are_summed_in_float32_and_rounded_once(dtype, device):
    """A half field's sum is accumulated in float32: within one rounding of the float32 sum of its values, where
    rounding each step to the half type would be off by far more over 3000 rows."""
    x = (torch.rand(3000, 16, device=device) + 1).to(dtype)
    g = torch.ones(3000, 16, device=device, dtype=dtype)
    got = _summed(STREAM, (2,))(x, g)[2]
    assert got.dtype == dtype and got.shape == (1, 16)
    assert torch.equal(got.float(), torch.full((1, 16), 3000.0, device=device).to(dtype).float())


def test_one_launch_and_the_same_bits_run_after_run(device):
    """The sums are in the kernel that stores the elements (one launch, no torch op), and folded in index order:
    two runs give the same bits."""
    pipe = _summed(STREAM, (1, 2))
    x = torch.randn(257, 40, device=device)
    g = torch.randn(257, 40, device=device)
    with schedule_overrides(BLOCK_M=1, PROGRAMS=37):
        first = one_launch(pipe, x, g)
        again = pipe(x, g)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_the_norms_backward_is_one_kernel_with_the_parameter_gradients_summed():
    """layer_norm's backward with weight and bias is one kernel (the two parameters' gradients summed over the
    rows in it), and the gradients equal torch's."""
    x = torch.randn(33, 48, dtype=torch.float64, requires_grad=True)
    w = torch.randn(48, dtype=torch.float64, requires_grad=True)
    b = torch.randn(48, dtype=torch.float64, requires_grad=True)
    pipe = tc.library.layer_norm()
    assert "backward: 1 kernel(s)" in str(pipe.explain(x, w, b))
    ours = torch.autograd.grad(pipe(x, w, b).sum(), (x, w, b))
    theirs = torch.autograd.grad(torch.nn.functional.layer_norm(x, (48,), w, b).sum(), (x, w, b))
    for a, t in zip(ours, theirs):
        torch.testing.assert_close(a, t, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("build, fields, words", [
    (tc.map(lambda v: (v, v * 2.0)), (1,), "pipeline of attaches"),
    (tc.attach(tc.sum(axis=-1)) >> tc.map(lambda v, s: v - s) >> tc.sum(axis=-1), (0,), "pipeline of attaches"),
    (STREAM, (3,), r"in \[0, 3\)"),
    (STREAM, (1, 1), "distinct"),
])
def test_refused_where_no_rows_are_folded_or_a_field_is_named_wrongly(build, fields, words):
    with pytest.raises(UnsupportedError, match=words):
        _summed(build, fields)(*[torch.randn(4, 5)] * build.ir.num_inputs)


def test_an_integer_field_is_refused():
    pipe = tc.attach(tc.sum(axis=-1)) >> tc.map(lambda v, s: (v, s))
    with pytest.raises(UnsupportedError, match="only float fields"):
        _summed(pipe, (1,))(torch.ones(4, 5, dtype=torch.int32))


@pytest.mark.parametrize("x_shape, p_shape", [((40, 12), (40, 12)), ((3, 5, 12), (5, 12)), ((3, 5, 12), (1, 12))])
def test_the_norms_parameters_varying_along_the_rows_get_their_own_gradients(x_shape, p_shape):
    """A weight or bias that is not one row for every row (the input's full shape, one per position of a 3-d
    input) gets its gradient summed over the axes it broadcasts along only, as torch's."""
    x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
    w = torch.randn(p_shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(p_shape, dtype=torch.float64, requires_grad=True)
    g = torch.randn(x_shape, dtype=torch.float64)
    c = x_shape[-1]
    for ours, theirs, params in (
            (tc.library.rms_norm(), lambda: torch.nn.functional.rms_norm(x, (c,), eps=1e-6) * w, (w,)),
            (tc.library.layer_norm(), lambda: torch.nn.functional.layer_norm(x, (c,)) * w + b, (w, b))):
        got = torch.autograd.grad(ours(x, *params), (x, *params), g)
        want = torch.autograd.grad(theirs(), (x, *params), g)
        for a, t in zip(got, want):
            torch.testing.assert_close(a, t, rtol=1e-10, atol=1e-10)


H200_SHARED = 232448  # bytes a block may opt in to on an H200


@pytest.mark.parametrize("K, row_bytes, stages", [(8192, 4, 3), (8192, 8, 3), (8192, 16, 1), (16384, 8, 1),
                                                  (20000, 4, 1)],
                         ids=["bf16-pair", "f32-pair", "f64-pair", "f32-pair-16384", "swept"])
def test_held_rows_get_three_tiles_in_flight_where_they_fit_in_shared_memory(K, row_bytes, stages):
    """Three row tiles' loads in flight (and 8 warps) where three tiles fit in shared memory with room to spare;
    none for rows swept in several tiles, whose loop is not the one pipelined, nor on the interpreter."""
    cfg = schedule_attach(65536, K, True, False, 132, columns=True, row_bytes=row_bytes, shared_mem=H200_SHARED)
    assert cfg["ROW_STAGES"] == stages, cfg
    assert cfg["num_warps"] == (8 if stages > 1 else schedule_attach(65536, K, True, False)["num_warps"]), cfg
    on_cpu = schedule_attach(65536, K, True, True, 1, columns=True, row_bytes=row_bytes, shared_mem=0)
    assert on_cpu["ROW_STAGES"] == 1

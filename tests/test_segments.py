"""A kernel plan is a sequence of segments, its kernel written by the strategy its first fold's type selects, and
what the kernel reads after a fold says so by its phase."""
import pytest
import torch

import tricomb as tc
from tricomb.codegen.strategies import ElementwiseKernel, ReduceKernel, ScanKernel, strategy_for
from tricomb.lower.segments import Elementwise, LookBack, Store, Ticket, TileReduce, TileScan


def _plan(pipe, *inputs):
    return pipe.explain(*inputs).kernel_plan


def _types(plan):
    return tuple(type(s) for s in plan.segments)


def test_a_scan_then_a_reduce_is_two_folds_in_one_plan():
    plan = _plan(tc.parse("scan maximum | zip_with sub | max"), torch.ones(41), torch.ones(41))
    assert _types(plan) == (Elementwise, TileScan, LookBack, Elementwise, TileReduce, Ticket, Elementwise, Store)
    scan, reduce = plan.folds
    assert (scan.at, reduce.at) == (0, 2)
    between = plan.following(scan, Elementwise)
    assert (len(between.stages), between.first) == (1, 1)
    assert plan.following(scan, LookBack).fold is scan and plan.following(reduce, Ticket).fold is reduce


@pytest.mark.parametrize("pipe, types", [
    (tc.map(tc.exp), (Elementwise, Store)),
    (tc.parse("map softplus | sum"), (Elementwise, TileReduce, Ticket, Elementwise, Store)),
    (tc.cumsum(), (Elementwise, TileScan, LookBack, Elementwise, Store)),
])
def test_each_kernel_is_a_composition_of_segments(pipe, types):
    assert _types(_plan(pipe, torch.ones(8))) == types


def test_inputs_and_outputs_are_read_and_written_in_the_phase_after_their_folds():
    x, bias = torch.ones(6, 50), torch.ones(6)
    pipe = (tc.cumsum(axis=1) >> tc.zip_with(lambda s, b: s * b) >> tc.mean(axis=1)
            >> tc.zip_with(lambda m, c: m + c))
    plan = _plan(pipe, x, x, bias)
    assert [s.phase for s in plan.inputs] == [0, 1, 2] and [s.phase for s in plan.outputs] == [2]
    assert "in1 float32 rank 2 (joins after)" in str(pipe.explain(x, x, bias))


@pytest.mark.parametrize("pipe, strategy, kind", [
    (tc.map(tc.exp), ElementwiseKernel, "map"),
    (tc.sum(), ReduceKernel, "reduce"),
    (tc.cummax(), ScanKernel, "scan"),
    (tc.parse("scan maximum | zip_with sub | max"), ScanKernel, "scan"),
])
def test_the_first_folds_type_chooses_the_strategy(pipe, strategy, kind):
    inputs = [torch.ones(8)] * pipe.ir.num_inputs
    explained = pipe.explain(*inputs)
    assert type(strategy_for(explained.kernel_plan)) is strategy
    assert explained.kind == kind and str(explained).startswith(f"1 kernel: {kind}\n")


@pytest.mark.parametrize("pipe, shape", [(tc.map(tc.exp), (3, 8)), (tc.argmax(axis=1), (3, 8)),
                                         (tc.parse("scan maximum | zip_with sub | max"), (8,))])
def test_the_arguments_given_at_each_launch_lead_the_parameters(pipe, shape):
    """The launcher passes the slots' tensors (and a scan's status value) at each launch, in front of the
    arguments it fixes: they must lead the kernel's parameters, once each."""
    plan = _plan(pipe, *[torch.ones(shape)] * pipe.ir.num_inputs)
    params = strategy_for(plan).parameters()
    given = [p.name for p in params if p.host is None]
    assert [p.name for p in params[:len(given)]] == given
    assert given[:len(plan.slots)] == [s.name for s in plan.slots]
    assert len({p.name for p in params}) == len(params)


def test_whether_an_operator_commutes_is_read_from_the_stages_as_written():
    """An operator without identity gets a validity flag before planning; the flagged operator's own law check
    fails (its identity holds for valid lanes only), so commutativity is read before the rewrite."""
    x = torch.ones(3, 9)
    first = _plan(tc.reduce(lambda a, b: a, axis=1), x).folds[0]
    odd = _plan(tc.reduce(lambda a, b: a + b + 0.25 * a * b, axis=1), x).folds[0]
    last = _plan(tc.scan(lambda a, b: b), x).folds[0]
    assert (first.ordered, odd.ordered, last.commutes) == (True, False, False)

"""Scalar functions whose expressions share subexpressions: a first call costs time linear in the DAG.

``x = x * 0.5 + x * 0.25`` repeated n times is 3n distinct nodes whose unfolded tree has about 2**n: every pass
(tracing, equality and hashing, binding, evaluation, the oracle, emission, printing and keys) must visit each
distinct node once. The one timing bound here is a generous one on the first call; the rest check structure.
"""
import copy
import math
import pickle
import re
import sys
import time

import pytest
import torch

import tricomb as tc
from tricomb.pipeline.key import ir_key
from tricomb.scalar.ir import Arg, Call, Const, Function, dag_text, fold, walk
from tricomb.testing import assert_matches_torch

LEVELS = 40


def halving_steps(n: int, c: float = 0.25):
    """``x = x * 0.5 + x * c``, ``n`` times: each level uses the one below twice."""
    def steps(x):
        for _ in range(n):
            x = x * 0.5 + x * c
        return x
    return steps


def newton_rsqrt(x, steps: int = 15):
    """1/sqrt(x) by Newton's iteration from 1.0 (converges for x in (0, 3)); each step uses y three times."""
    y = x * 0.0 + 1.0
    for _ in range(steps):
        y = y * (1.5 - 0.5 * x * y * y)
    return y


def halving_map(n: int, c: float = 0.25):
    """``tc.map`` of :func:`halving_steps`, built on one line (a stage's location is part of its key)."""
    return tc.map(halving_steps(n, c))


def output_of(pipe):
    return pipe.ir.stages[0].fn.outputs[0]


# --- a first call: build, bind, emit and run, in time linear in the DAG ------------------------------------------

def test_a_forty_level_shared_dag_runs_once_in_seconds_and_matches_torch():
    x = torch.randn(64)
    start = time.perf_counter()
    pipe = tc.map(lambda v: halving_steps(LEVELS)(v))
    result = pipe(x)
    assert time.perf_counter() - start < 30  # was about 2**40 node visits: hours
    expected = x.double()
    for _ in range(LEVELS):
        expected = expected * 0.5 + expected * 0.25
    torch.testing.assert_close(result, expected.float())
    assert_matches_torch(pipe, x)


def test_each_shared_subexpression_is_emitted_once_as_a_temporary():
    pipe = tc.map(halving_steps(LEVELS))
    source = pipe.source(torch.randn(8))
    temporaries = [line for line in source.splitlines() if re.match(r"\s*t\d+ = ", line)]
    assert len(temporaries) == 3 * LEVELS  # two products and a sum per level, each named once
    assert len(source) < 50_000


def test_newton_rsqrt_of_fifteen_steps_matches_torch():
    x = torch.rand(64) * 1.5 + 0.5
    pipe = tc.map(lambda v: newton_rsqrt(v))
    torch.testing.assert_close(pipe(x), torch.rsqrt(x))
    assert_matches_torch(pipe, x)


def test_two_outputs_sharing_a_deep_subtree_and_a_reduce_after_them():
    x = torch.randn(6, 5)
    deep = halving_steps(30)
    pairs = tc.map(lambda v: (deep(v), deep(v) * 2.0 + v))
    assert_matches_torch(pairs, x)
    total = tc.map(lambda v: deep(v) * deep(v)) >> tc.sum(axis=-1)
    assert_matches_torch(total, x)


# --- sharing: equal expressions are one object, traversals visit each node once -----------------------------------

def test_tracing_twice_gives_the_same_nodes():
    first, second = tc.map(halving_steps(LEVELS)), tc.map(halving_steps(LEVELS))
    assert output_of(first) is output_of(second)
    assert first.ir == second.ir and hash(first.ir) == hash(second.ir)
    assert output_of(tc.map(halving_steps(LEVELS, 0.125))) != output_of(first)


def test_walk_and_fold_visit_each_distinct_node_once():
    out = output_of(tc.map(halving_steps(LEVELS)))
    nodes = list(walk(out))
    assert len(nodes) == len(set(map(id, nodes))) == 3 * LEVELS + 3  # x, 0.5, 0.25 and three per level
    calls = []
    fold(Function(1, (out,)), [1.0], lambda node, operands: calls.append(node) or operands[0])
    assert len(calls) == 3 * LEVELS


def test_a_deep_chain_passes_python_recursion_limit():
    def chain(x):
        for _ in range(sys.getrecursionlimit() * 2):
            x = x * 1.0 + 0.0
        return x
    fn = tc.map(chain).ir.stages[0].fn
    assert fold(fn, [2.0], lambda node, operands: operands[0])[0] == 2.0
    assert len(dag_text(fn.outputs)) > 0 and len(repr(fn)) > 0 and len(str(tc.map(lambda v: chain(v)))) > 0


def test_constants_keep_type_and_sign_when_shared():
    assert Const(0.0) is Const(0.0) and Const(math.nan) == Const(float("nan"))
    assert Const(0.0) != Const(-0.0) and Const(1) != Const(1.0) and Const(1) != Const(True)
    assert Const(-0.0).value == 0.0 and math.copysign(1.0, Const(-0.0).value) < 0


def test_copies_and_pickles_are_the_shared_nodes():
    out = output_of(tc.map(halving_steps(10)))
    assert pickle.loads(pickle.dumps(out)) is out
    assert copy.copy(out) is out and copy.deepcopy(out) is out


# --- text and keys: linear in the DAG, and faithful -----------------------------------------------------------

def test_keys_of_deep_dags_are_short_and_tell_them_apart():
    pipes = [halving_map(LEVELS), halving_map(LEVELS, 0.125), halving_map(LEVELS - 1), halving_map(LEVELS, -0.0),
             halving_map(LEVELS, 0.0)]
    keys = [ir_key(p.ir) for p in pipes]
    assert len(set(keys)) == len(keys)
    assert ir_key(halving_map(LEVELS).ir) == keys[0]
    assert all(len(k) < 20_000 for k in keys) and len(repr(pipes[0].ir)) < 20_000


def test_keys_tell_apart_constants_of_one_value_and_another_type():
    texts = {ir_key(tc.map(lambda v, c=c: v * c).ir) for c in (1, 1.0, True, 0.0, -0.0)}
    assert len(texts) == 5


def test_keys_name_what_equality_ignores_but_the_module_shows():
    """The function's name is printed in the emitted module, so it is in the key, as in ``repr``."""
    def f(v):
        return v * 2.0

    def g(v):
        return v * 2.0
    assert tc.map(f).ir.stages[0].fn == tc.map(g).ir.stages[0].fn
    assert ir_key(tc.map(f).ir) != ir_key(tc.map(g).ir)


def test_dag_text_numbers_each_node_once():
    x = Arg(0)
    y = Call("mul", (x, x))
    assert dag_text((Call("add", (y, y)),)) == "%0 = Arg(0); %1 = Call('mul', %0, %0); %2 = Call('add', %1, %1); -> (%2)"


def test_pipeline_text_of_a_deep_lambda_names_shared_subexpressions():
    text = str(tc.map(lambda v: halving_steps(LEVELS)(v)))
    assert len(text) < 5_000 and text.startswith("map (x -> let t0 = ((x * 0.5) + (x * 0.25)); t1 = ")


@pytest.mark.parametrize("text", ["map x -> exp(x) * exp(x) + exp(x)", "map x -> softplus(x * 2.0) / (1.0 + softplus(x * 2.0))",
                                  "zip_with (x, y) -> (x * y, x * y + 1.0)"])
def test_small_lambdas_with_shared_parts_still_print_as_text_that_parses_back(text):
    pipe = tc.parse(text)
    assert "let" not in str(pipe)
    assert tc.parse(str(pipe)) == pipe

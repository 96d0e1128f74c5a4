"""Every kind of kernel plan runs, and matches torch, on the Triton this suite runs under.

CI runs the suite under the newest Triton the pin admits and under the oldest (.ci/run), so each plan kind's
emitted code is run under both; the conftest's mask check makes every load, store and atomic with a mask of
non-bool lanes fail on either. Tiny tiles force the cross-program paths (split rows, the look-back) that the
heuristics choose only for large inputs on the GPU.
"""
import pytest
import torch

import tricomb as tc
from conftest import LOOKBACK_TILES, one_launch
from tricomb.testing import assert_matches_torch, schedule_overrides


def _x(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _recurrence():
    return tc.library.linear_recurrence(axis=-1) >> tc.map(lambda h, decays: h)


def _quads():
    return tc.map(lambda v: (v, v, v, v)) >> tc.scan(
        lambda a, b, c, d, e, f, g, h: (a + e, tc.maximum(b, f), tc.minimum(c, g), h), axis=-1)


SPLIT = {"SPLIT": 3, "BLOCK_K": 16}
TILES = {"BLOCK_K": 4}

# (pipeline, inputs, schedule entries): one or more per plan kind
KINDS = {
    "map": (tc.map(tc.exp), [_x(37)], {}),
    "map-strided": (tc.map(tc.exp), [_x(9, 7).T], {}),
    "zip-unused-field": (tc.zip_with(lambda a, b: a), [_x(5, 3), _x(3)], {}),
    "zip-tuple-broadcast": (tc.zip_with(lambda x, y: (x, x + y)), [_x(4, 1), _x(6)], {}),
    "reduce": (tc.sum(axis=1), [_x(6, 37)], TILES),
    "reduce-user-operator": (tc.reduce(lambda a, b: a + b + 0.25 * a * b, identity=0.0, axis=1),
                             [_x(3, 9) * 0.1], TILES),
    "split-reduce": (tc.sum(), [_x(100)], SPLIT),
    "split-argmax": (tc.argmax(axis=1), [_x(2, 70)], SPLIT),
    "split-logsumexp": (tc.library.logsumexp(axis=1), [_x(2, 70)], SPLIT),
    "scan": (tc.cumsum(axis=1), [_x(3, 37)], TILES),
    "scan-exclusive-reversed": (tc.cumsum(axis=0, reverse=True, exclusive=True), [_x(21, 2)], TILES),
    "look-back-one-field": (tc.cumsum(), [_x(41)], LOOKBACK_TILES),
    "look-back-two-fields": (_recurrence(), [_x(2, 41), torch.rand(2, 41)], LOOKBACK_TILES),
    "look-back-four-fields": (_quads(), [_x(2, 41)], LOOKBACK_TILES),
    "look-back-aggregates-only": (tc.cummax(), [_x(41)], {**LOOKBACK_TILES, "PUBLISH_PREFIX": False}),
    "scan-then-reduce": (tc.parse("scan maximum | zip_with sub | max"), [_x(41), _x(41)], TILES),
    "scan-then-reduce-look-back": (tc.parse("scan maximum | zip_with sub | max"), [_x(41), _x(41)],
                                   LOOKBACK_TILES),
    "fanout": (tc.fanout(tc.sum(axis=1), tc.max(axis=1)), [_x(4, 30)], {}),
    "fanout-split": (tc.fanout(tc.sum(axis=1), tc.min(axis=1)), [_x(2, 70)], SPLIT),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_plan_kind_runs_as_one_launch_and_matches_torch(kind):
    pipe, inputs, schedule = KINDS[kind]
    with schedule_overrides(**schedule):
        result = one_launch(pipe, *inputs)
    assert_matches_torch(pipe, *inputs, result=result)

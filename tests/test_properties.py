"""Hypothesis: random pipelines on random tensors equal the float64 torch oracle, within tolerances that
grow with the reduction length (tricomb.testing.assertions)."""
import torch
from hypothesis import given, note

from tricomb.testing import assert_matches_torch, schedule_overrides
from tricomb.testing.strategies import pipelines_and_inputs

from conftest import DEVICES


def _check(case, overrides=None):
    note(repr(case))
    for device in DEVICES:
        inputs = [t.to(device) for t in case.inputs]
        with schedule_overrides(**(overrides or {})):
            assert_matches_torch(case.pipeline, *inputs)


@given(pipelines_and_inputs())
def test_random_pipelines_match_torch(case):
    _check(case)


@given(pipelines_and_inputs(max_numel=1024))
def test_random_pipelines_match_torch_with_tiny_tiles(case):
    """Tiny tiles reach the multi-tile loops, the carried scan prefix, and split rows with the ticket."""
    _check(case, {"BLOCK": 16, "BLOCK_M": 2, "BLOCK_K": 4, "SPLIT": 3})


def test_half_precision_sums_accumulate_in_float32(device):
    """A float16 sum of 2048 + 1 * 2048 is 4096 only if the accumulator is wider than float16."""
    x = torch.tensor([2048.0] + [1.0] * 2048, dtype=torch.float16, device=device)
    from tricomb import sum as tc_sum
    assert tc_sum()(x).item() == 4096.0

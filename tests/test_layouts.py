"""Result layouts as torch's: an elementwise result of permuted inputs keeps their permutation (and the kernel
walks memory in that order, so both sides stay contiguous); reductions and scans give contiguous results."""
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch


def test_elementwise_result_of_a_transposed_input_is_transposed_like_torch(device):
    x = torch.randn(33, 17, device=device).t()
    got = assert_matches_torch(tc.map(lambda v: v * 2.0), x)
    assert got.stride() == (x * 2).stride() == (1, 17)
    plan = str(tc.map(lambda v: v * 2.0).explain(x))
    assert "iteration groups (outer to inner): kept[1, 0]" in plan  # one run over memory: a flat index


def test_permuted_three_d_inputs_and_mixed_layouts(device):
    x = torch.randn(4, 5, 6, device=device).permute(2, 0, 1)
    y = torch.randn(6, 4, 5, device=device)
    for pipe, args in [(tc.map(tc.exp), (x,)), (tc.zip_with(tc.add), (x, y)), (tc.zip_with(tc.add), (y, x)),
                       (tc.zip_with(tc.mul), (x[:, :1], y))]:
        assert_matches_torch(pipe, *args)


def test_reductions_and_scans_are_contiguous_as_in_torch(device):
    x = torch.randn(4, 5, 6, device=device).permute(2, 0, 1)
    for pipe in [tc.sum(axis=1), tc.max(axis=(0, 2), keepdim=True), tc.cumsum(axis=1), tc.argmax(axis=2),
                 tc.mean(axis=0) >> tc.map(tc.exp)]:
        got = assert_matches_torch(pipe, x)
        assert got.is_contiguous()


def test_out_keeps_the_layout_it_was_given(device):
    x = torch.randn(3, 4, device=device).t()
    out = torch.empty(4, 3, device=device)
    got = tc.map(tc.exp)(x, out=out)
    assert got is out and out.stride() == (3, 1)
    assert_matches_torch(tc.map(tc.exp), x, result=got, check_layout=False)


ROW_TILES = [{}, {"BLOCK_K": 4, "BLOCK_M": 2}]  # the schedule's tiles, and rows in several tiles of 4


def test_inputs_constant_along_the_row_are_read_as_columns(device):
    """An input broadcast along the folded axes (a (B, 1) scale, a (B, 1, D) one folded over axis 1) is loaded
    once a row, in every plan that folds rows: the values are torch's, and one with a stride along the row (or
    rows of no element) is read per element as before."""
    from tricomb.testing import schedule_overrides
    x = torch.randn(6, 9, device=device)
    scale, three = torch.randn(6, 1, device=device), torch.randn(2, 5, 3, device=device)
    cases = [(tc.zip_with(tc.mul) >> tc.sum(axis=-1), (x, scale)),
             (tc.zip_with(tc.mul) >> tc.cumsum(axis=-1), (x, scale)),
             (tc.cumsum(axis=-1) >> tc.zip_with(tc.mul), (x, scale)),
             (tc.attach(tc.max(axis=-1)) >> tc.zip_with(lambda v, m, s: (v - m) * s), (x, scale)),
             (tc.zip_with(tc.mul) >> tc.max(axis=1), (three, three[:, :1])),
             (tc.zip_with(tc.mul) >> tc.sum(axis=-1), (x, x[:, :1].expand(6, 9))),
             (tc.zip_with(tc.mul) >> tc.sum(axis=-1), (x[:, :0], scale))]
    for tiles in ROW_TILES:
        with schedule_overrides(**tiles):
            for pipe, args in cases:
                assert_matches_torch(pipe, *args)

"""Writing a result in place: ``out=`` may be the input it is exactly (same memory, shape and strides) in every
plan kind, since each program reads its positions of that input before it writes them; ``out=`` over part of
an input (a shifted view, an interleaved one, a transpose of the same memory, an expanded one) is refused with
AliasError before anything runs, and nothing is written. Inputs that are not written stay as they were."""
import pytest
import torch

import tricomb as tc
from conftest import LOOKBACK_TILES
from tricomb.testing import schedule_overrides


def _x(*shape, device="cpu", seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape))).to(device)


SOFTMAX = tc.library.softmax(axis=-1)
RECURRENCE = tc.library.linear_recurrence(axis=-1) >> tc.map(lambda h, decay: h)

# name -> (pipeline, input shapes, the input out= is, torch's function of the inputs, schedule entries)
CASES = {
    "map": (tc.map(lambda v: v * 2.0 + 1.0), [(37,)], 0, lambda x: x * 2 + 1, {}),
    "map-strided": (tc.map(tc.exp), [(9, 7)], 0, torch.exp, {}),
    "zip_with-into-the-first": (tc.zip_with(lambda p, g: p - 0.1 * g), [(5, 6), (5, 6)], 0,
                                lambda p, g: p - 0.1 * g, {}),
    "zip_with-into-the-second": (tc.zip_with(lambda a, b: a * b + b), [(4, 8), (4, 8)], 1,
                                 lambda a, b: a * b + b, {}),
    "zip_with-broadcast-beside": (tc.zip_with(lambda a, w: a * w), [(6, 5), (5,)], 0, lambda a, w: a * w, {}),
    "scan-rows": (tc.cumsum(axis=1), [(3, 37)], 0, lambda x: torch.cumsum(x, 1), {"BLOCK_K": 4}),
    "scan-reversed": (tc.cumsum(axis=0, reverse=True), [(21, 2)], 0,
                      lambda x: torch.flip(torch.cumsum(torch.flip(x, [0]), 0), [0]), {"BLOCK_K": 4}),
    "cummax-two-fields-into-one": (tc.cummax(axis=1) >> tc.map(lambda v, i: v), [(3, 30)], 0,
                                   lambda x: torch.cummax(x, 1).values, {"BLOCK_K": 4}),
    "scan-look-back": (tc.cumsum(), [(41,)], 0, lambda x: torch.cumsum(x, 0), LOOKBACK_TILES),
    "recurrence-look-back": (RECURRENCE, [(2, 41), (2, 41)], 0, None, LOOKBACK_TILES),
    "attach-whole-row": (SOFTMAX, [(4, 30)], 0, lambda x: torch.softmax(x, -1), {}),
    "attach-row-sweeps": (SOFTMAX, [(5, 30)], 0, lambda x: torch.softmax(x, -1), {"BLOCK_K": 4, "BLOCK_M": 2}),
    "attach-row-shared-by-programs": (SOFTMAX, [(2, 300)], 0, lambda x: torch.softmax(x, -1),
                                      {"SPLIT": 7, "BLOCK_K": 16}),
    "reduce-then-an-input-after": (tc.sum(axis=-1) >> tc.zip_with(lambda s, b: s + b), [(6, 9), (6,)], 1,
                                   lambda x, b: x.sum(-1) + b, {}),
    "keepdim-over-size-1": (tc.sum(axis=-1, keepdim=True), [(6, 1)], 0, lambda x: x.sum(-1, keepdim=True), {}),
}


def _recurrence(values, decays):
    h, out = torch.zeros(values.shape[0], dtype=values.dtype), []
    for k in range(values.shape[1]):
        h = h * decays[:, k] + values[:, k]
        out.append(h)
    return torch.stack(out, 1)


@pytest.mark.parametrize("name", list(CASES))
def test_out_may_be_the_input_it_is_exactly(name, device):
    pipe, shapes, into, reference, schedule = CASES[name]
    inputs = [_x(*shape, device=device, seed=k) for k, shape in enumerate(shapes)]
    if name == "map-strided":
        inputs = [inputs[0].t()]  # (a transposed input, written in place with its own strides)
    if name.startswith("recurrence"):
        inputs[1] = inputs[1].sigmoid()
    before = [t.clone() for t in inputs]
    want = (reference or _recurrence)(*[t.cpu() for t in before])
    with schedule_overrides(**schedule):
        result = pipe(*inputs, out=inputs[into])
    assert result is inputs[into]
    torch.testing.assert_close(inputs[into].cpu(), want, rtol=1e-5, atol=1e-5)
    for k, (t, b) in enumerate(zip(inputs, before)):
        if k != into:
            assert torch.equal(t, b), f"input {k} changed"


def test_a_tuple_result_written_over_several_inputs(device):
    """An optimizer step's shape: three results, each over the input it updates; the gradient is not written."""
    step = tc.zip_with(lambda p, g, m, lr: (p - lr * (0.9 * m + g), 0.9 * m + g))
    p, g, m = (_x(40, device=device, seed=k) for k in range(3))
    want_p, want_m = p - 0.01 * (0.9 * m + g), 0.9 * m + g
    g_before = g.clone()
    got = step(p, g, m, 0.01, out=(p, m))
    assert got[0] is p and got[1] is m
    torch.testing.assert_close(p, want_p)
    torch.testing.assert_close(m, want_m)
    assert torch.equal(g, g_before)


def _partial_overlaps(device):
    base = _x(20, device=device)
    grid = _x(6, 6, device=device)
    square = _x(5, 5, device=device)
    row = _x(1, 5, device=device)
    return {
        "shifted": (tc.map(tc.exp), [base[:10]], base[1:11]),
        "interleaved": (tc.map(tc.exp), [base[::2]], base[1::2]),
        "transposed-same-memory": (tc.map(tc.exp), [square], square.t()),
        "a-row-of-a-column-input": (tc.zip_with(tc.add), [grid[:, :1].expand(6, 6).contiguous(), grid], grid.t()),
        "expanded-input": (tc.zip_with(tc.add), [row, _x(4, 5, device=device)], row.expand(4, 5)),
        "a-second-input-over-the-written-one": (tc.zip_with(tc.add), [base[:10], base[2:12]], base[:10]),
        "a-scan-into-a-shifted-view": (tc.cumsum(), [base[:10]], base[5:15]),
    }


@pytest.mark.parametrize("name", ["shifted", "interleaved", "transposed-same-memory", "a-row-of-a-column-input",
                                  "expanded-input", "a-second-input-over-the-written-one",
                                  "a-scan-into-a-shifted-view"])
def test_out_over_part_of_an_input_is_refused_and_writes_nothing(name, device):
    pipe, inputs, out = _partial_overlaps(device)[name]
    memory = [t.clone() for t in inputs] + [out.clone()]
    with pytest.raises((tc.AliasError, tc.ShapeError)) as info:
        pipe(*inputs, out=out)
    assert isinstance(info.value, tc.AliasError) or "zero stride" in str(info.value)
    for t, kept in zip(list(inputs) + [out], memory):
        assert torch.equal(t, kept)


@pytest.mark.parametrize("reverse", [False, True])
def test_an_exclusive_scan_is_never_written_in_place(reverse, device):
    """Its tiles store each result one place along the axis, over the next tile's first element before that
    tile is read: refused whatever the tiles, with the reason."""
    x = _x(41, device=device)
    kept = x.clone()
    with pytest.raises(tc.AliasError, match="out= is input 0 itself, but .* exclusive scan stores each result one "
                                            "place along"):
        tc.cumsum(exclusive=True, reverse=reverse)(x, out=x)
    assert torch.equal(x, kept)


def test_alias_error_is_documented_and_an_argument_error():
    assert issubclass(tc.AliasError, tc.ArgumentError) and issubclass(tc.AliasError, ValueError)
    assert "out=" in tc.AliasError.__doc__

"""Tuple streams: a map or zip_with may return several values; later stages take them as arguments; a tuple
result is a tuple of tensors, each with torch's own dtype, shape and layout, all from one kernel."""
import pytest
import torch

import tricomb as tc
from tricomb.testing import assert_matches_torch, count_launches


def test_fields_flow_into_later_stages_in_one_kernel(device):
    x = torch.randn(5, 7, device=device)
    b = torch.randn(7, device=device)
    pipe = (tc.map(lambda v: (v, tc.exp(v), v > 0))
            >> tc.map(lambda v, e, positive: (tc.where(positive, v, e - 1.0), e))
            >> tc.zip_with(lambda elu, e, bias: (elu + bias, e * bias)))
    assert pipe.num_inputs == 2
    pipe(x, b)  # the first call emits the module (torch probes dtypes on one-element samples then)
    with count_launches() as launches:
        result = pipe(x, b)
    assert launches.triton == 1 and not launches.torch_ops
    elu, scaled = assert_matches_torch(pipe, x, b, result=result)
    xc, bc = x.cpu(), b.cpu()
    torch.testing.assert_close(elu.cpu(), torch.where(xc > 0, xc, xc.exp() - 1) + bc)
    torch.testing.assert_close(scaled.cpu(), xc.exp() * bc)


def test_each_field_has_its_own_dtype(device):
    x = torch.arange(-3, 4, dtype=torch.int32, device=device)
    doubled, positive, half = tc.map(lambda v: (v * 2, v > 0, v / 2))(x)
    assert (doubled.dtype, positive.dtype, half.dtype) == (torch.int32, torch.bool, torch.float32)
    assert_matches_torch(tc.map(lambda v: (v * 2, v > 0, v / 2)), x)


def test_a_field_from_some_inputs_keeps_their_shape(device):
    """torch returns ``x`` itself at x's shape, not broadcast against y: each field is stored at the broadcast of
    the inputs it is computed from, once per element."""
    x = torch.randn(3, 1, 4, device=device)
    y = torch.randn(5, 4, device=device)
    pipe = tc.zip_with(lambda a, b: (a * 2.0, b + 1.0, a * b, 7.0))
    out = assert_matches_torch(pipe, x, y)
    assert [tuple(o.shape) for o in out] == [(3, 1, 4), (5, 4), (3, 5, 4), (3, 5, 4)]
    single = tc.zip_with(lambda a, b: a)(x, y)
    assert single.shape == x.shape and torch.equal(single.cpu(), x.cpu())


def test_tuple_after_a_reduce(device):
    x = torch.randn(6, 9, device=device)
    assert_matches_torch(tc.sum(axis=1) >> tc.map(lambda s: (s, s * s)), x)


def test_out_takes_a_tuple_for_a_tuple_result(device):
    x = torch.randn(4, 3, device=device)
    pipe = tc.map(lambda v: (v + 1.0, v > 0))
    out = (torch.empty(4, 3, device=device), torch.empty(4, 3, dtype=torch.bool, device=device))
    got = pipe(x, out=out)
    assert got[0] is out[0] and got[1] is out[1]
    torch.testing.assert_close(out[0], x + 1)
    with pytest.raises(tc.TricombError, match="out= must be a tuple of 2 tensors"):
        pipe(x, out=out[0])
    with pytest.raises(tc.DTypeError, match=r"out\[1\] has dtype torch.float32"):
        pipe(x, out=(torch.empty(4, 3, device=device), torch.empty(4, 3, device=device)))


def test_reducing_a_tuple_stream_is_refused_until_tuple_operators_exist():
    with pytest.raises(tc.UnsupportedError, match="2-tuple stream"):
        tc.map(lambda v: (v, v * 2)) >> tc.sum()


def test_tuple_functions_print_as_tuples():
    assert str(tc.map(lambda v: (v, v * 2))) == "map (x -> (x, (x * 2)))"

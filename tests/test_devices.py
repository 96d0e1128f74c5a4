"""Devices: inputs on different devices are refused before anything launches, naming the devices; a tensor on
a CUDA device other than the current one runs there (the launch enters that device's context)."""
import pytest
import torch

import tricomb as tc
import tricomb.testing

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_inputs_on_cpu_and_cuda_are_refused_naming_both():
    with pytest.raises(tc.DeviceError, match=r"input 0 on cpu, input 1 on cuda:0"):
        tc.zip_with(tc.add)(torch.ones(3), torch.ones(3, device="cuda"))


@pytest.mark.gpu
@two_gpus
def test_a_tensor_on_another_gpu_runs_there():
    torch.cuda.set_device(0)
    x = torch.randn(1 << 20, device="cuda:1")
    pipes = [tc.map(tc.softplus), tc.map(tc.softplus) >> tc.sum(), tc.cumsum(), tc.argmax(),
             tc.zip_with(lambda a, b: (a, a * b))]
    for pipe in pipes:
        args = (x, x.flip(0)) if pipe.num_inputs == 2 else (x,)
        got = pipe(*args)
        for g in (got if isinstance(got, tuple) else (got,)):
            assert g.device == x.device
        tc.testing.assert_matches_torch(pipe, *args, result=got)
    assert torch.cuda.current_device() == 0


@pytest.mark.gpu
@two_gpus
def test_inputs_on_two_gpus_are_refused():
    with pytest.raises(tc.DeviceError, match=r"input 0 on cuda:0, input 1 on cuda:1"):
        tc.zip_with(tc.add)(torch.ones(3, device="cuda:0"), torch.ones(3, device="cuda:1"))
    with pytest.raises(tc.DeviceError, match="out= is on cuda:1"):
        tc.map(tc.exp)(torch.ones(3, device="cuda:0"), out=torch.empty(3, device="cuda:1"))

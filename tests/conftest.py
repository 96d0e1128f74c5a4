"""Shared fixtures: the devices to run on (the CPU through Triton's interpreter, and CUDA when present), and
hypothesis profiles (``TRICOMB_HYPOTHESIS_PROFILE=gpu`` draws more examples)."""
import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

settings.register_profile("default", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("gpu", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# the gpu profile without shrinking: a failing example is reported at once (not minimal), for short device runs
settings.register_profile("gpu-noshrink", max_examples=200, deadline=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("TRICOMB_HYPOTHESIS_PROFILE", "default"))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# One tile of 4 elements per program, the prefix found by the decoupled look-back over 2 predecessors at a time;
# with PUBLISH_PREFIX off, every look-back walks back over aggregates to the row's start.
LOOKBACK_TILES = {"BLOCK_K": 4, "LOOKBACK": True, "WINDOW": 2}
LOOKBACK_AGGREGATES_ONLY = {**LOOKBACK_TILES, "WINDOW": 4, "PUBLISH_PREFIX": False}


def one_launch(pipe, *inputs):
    """``pipe(*inputs)``, checked to be one Triton launch and no torch computation (counted on a second call: the
    first builds the kernel, which infers dtypes on small host tensors)."""
    from tricomb.testing import count_launches
    pipe(*inputs)
    with count_launches() as launches:
        result = pipe(*inputs)
    assert launches.triton == 1 and launches.total == 1, (launches.triton, launches.torch_ops)
    return result


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """Each test taking ``device`` runs on the CPU (Triton's interpreter) and, when present, on CUDA."""
    return request.param


def pytest_configure(config):
    # Emitted modules go to a per-run cache so a test run never depends on an earlier one's files.
    if "TRICOMB_CACHE_DIR" not in os.environ:
        import tempfile
        os.environ["TRICOMB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tricomb-test-cache-")

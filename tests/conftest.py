"""Shared fixtures: the devices to run on (the CPU through Triton's interpreter, and CUDA when present),
hypothesis profiles (``TRICOMB_HYPOTHESIS_PROFILE=gpu`` draws more examples; ``ci-noshrink``, CI's, does not
shrink), and a check that every mask Triton's interpreter sees is made of bools."""
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from triton.runtime.interpreter import InterpreterBuilder

settings.register_profile("default", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("gpu", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# the gpu profile without shrinking: a failing example is reported at once (not minimal), for short device runs
settings.register_profile("gpu-noshrink", max_examples=200, deadline=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate],
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# CI (the variable CI set) reports a failing example as drawn: shrinking one through Triton's interpreter can
# take as long as the whole suite. The default profile is derandomized, so the same test run locally draws the
# same example and shrinks it.
settings.register_profile("ci-noshrink", parent=settings.get_profile("default"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("TRICOMB_HYPOTHESIS_PROFILE",
                                     "ci-noshrink" if os.environ.get("CI") else "default"))

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


def _bool_lanes(method, position):
    """``method`` of Triton's interpreter, refusing a mask whose lanes are not bools (the mask is argument
    ``position``). Triton 3.9's interpreter refuses such a mask itself, 3.6 to 3.8 take it: checking it here
    makes every run of the suite, on any Triton of the range, catch emitted masks that only some accept."""
    def checked(self, *args):
        lanes = np.asarray(args[position].data).dtype
        if lanes != np.bool_:
            raise AssertionError(f"{method.__name__}: a mask of {lanes} lanes (Triton 3.9's interpreter refuses "
                                 "it): build masks from bools")
        return method(self, *args)
    return checked


@pytest.fixture(autouse=True, scope="session")
def masks_are_bools():
    """Every load, store and atomic the interpreter runs has a mask of bools."""
    patched = {"create_masked_load": 1, "create_masked_store": 2, "create_atomic_rmw": 3}
    originals = {name: getattr(InterpreterBuilder, name) for name in patched}
    for name, position in patched.items():
        setattr(InterpreterBuilder, name, _bool_lanes(originals[name], position))
    yield
    for name, method in originals.items():
        setattr(InterpreterBuilder, name, method)

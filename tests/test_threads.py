"""Concurrent first calls: threads building, loading and launching kernels at once get right results and leave
the process working (docs/reliability.md, "Threads")."""
import threading

import pytest
import torch

import tricomb as tc

from conftest import DEVICES


def _pipelines(k: int):
    """Pipelines of each plan kind, new to the process (their constant differs per round)."""
    scale = 1.0 + k / 8
    return [
        (tc.map(lambda v: v * scale) >> tc.sum(), lambda x: (x * scale).sum()),
        (tc.parse(f"map softplus | map x -> x * {scale} | sum(axis=-1)"),
         lambda x: (torch.nn.functional.softplus(x) * scale).sum(-1)),
        (tc.map(lambda v: v + scale) >> tc.cumsum(axis=-1), lambda x: (x + scale).cumsum(-1)),
        (tc.map(lambda v: v - scale) >> tc.max(axis=0), lambda x: (x - scale).amax(0)),
    ]


def _race(calls) -> list:
    """Run each call in its own thread, all released together; the exceptions they raised."""
    start, failures = threading.Barrier(len(calls)), []

    def work(call):
        try:
            start.wait()
            call()
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            failures.append(error)
    threads = [threading.Thread(target=work, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def _checked(pipe, reference, x):
    def call():
        torch.testing.assert_close(pipe(x), reference(x), rtol=1e-5, atol=1e-4)
    return call


@pytest.mark.parametrize("device", DEVICES)
def test_concurrent_first_calls_are_right_and_leave_the_process_working(device):
    x = torch.randn(6, 33, device=device)
    for k in range(3):
        pipes = _pipelines(k)
        one = pipes[0]
        calls = [_checked(*one, x) for _ in range(4)]  # one pipeline's first call, four times at once
        calls += [_checked(p, r, x) for p, r in pipes[1:]]  # and others of each kind beside it
        assert _race(calls) == []
    torch.testing.assert_close(tc.map(tc.exp)(x), x.exp())  # a later call in the same process


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_and_cuda_first_calls_at_once():
    """The interpreter switch is process-wide: a CPU (interpreted) and a CUDA (compiled) load racing."""
    for k in range(3):
        (pipe, reference), (other, other_reference) = _pipelines(10 + k)[:2]
        calls = [_checked(pipe, reference, torch.randn(5, 40, device=d)) for d in ("cpu", "cuda", "cpu", "cuda")]
        calls += [_checked(other, other_reference, torch.randn(3, 7, device="cuda"))]
        assert _race(calls) == []

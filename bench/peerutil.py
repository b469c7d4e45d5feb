"""Helpers of the PyTorch peers (bench/*_peers.py, run as scripts from the repository root): the
torch/CUDA check and the timing rule (median of reps CUDA-synchronised runs after a warm-up)."""
import statistics
import time


def cuda_torch():
    """(torch, device), or None after saying why there is none."""
    try:
        import torch
    except ImportError:
        print("torch unavailable")
        return None
    if not torch.cuda.is_available():
        print("torch: no CUDA device")
        return None
    return torch, torch.device("cuda")


def median_ms(torch, fn, reps):
    """Median milliseconds of fn() over reps runs, after one warm-up run."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)

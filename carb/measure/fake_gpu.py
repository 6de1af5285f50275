"""A fake GPU for dry runs and tests of the GPU collector (:mod:`carb.measure.gpu_run` ``--fake-device``)
on a CPU: torch runs on the CPU, and an NVML-like object reports an energy counter that steps at update
edges (``period_s``) at a constant ``power_W`` on the real clock, plus utilization, temperature and
clocks. No pynvml, no CUDA."""
from __future__ import annotations

import math
import time


class CpuOps:
    """The ``ops`` of :mod:`carb.measure.sweep` on the CPU (peak memory: the bytes of the input and the
    parameters, a stand-in; the dry run checks the plumbing, not the numbers)."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device = torch.device("cpu")
        self._peak = 0

    def sync(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def reset_peak(self) -> None:
        self._peak = 0

    def max_allocated_bytes(self) -> int:
        return max(self._peak, 1 << 20)

    def note_forward(self, model, x, out) -> None:
        """The stand-in peak of one forward: the bytes of the parameters, the input and the output (the CPU
        has no allocator peak to read; real GPU data must pass the importers' plausibility check, which
        refuses memory below the weights)."""
        def nbytes(t) -> int:
            return int(t.numel() * t.element_size())

        self._peak = max(self._peak, sum(nbytes(p) for p in model.parameters()) + nbytes(x) + nbytes(out))

    def facts(self) -> dict:
        return {"device_name": "Fake GPU (CPU dry run)", "cuda_version": None, "cudnn_version": None,
                "compute_capability": "0.0", "total_memory_MB": 1024.0, "multiprocessors": 1,
                "torch_version": self.torch.__version__}


class FakeGpu:
    """NVML-like readings: a counter updating every ``period_s`` at ``power_W`` (real clock)."""

    def __init__(self, period_s: float = 0.05, power_W: float = 300.0, clock=time.perf_counter) -> None:
        self.period_s, self.power_W, self.clock = period_s, power_W, clock
        self.t0 = clock()

    def read_energy_mJ(self) -> int:
        k = math.floor((self.clock() - self.t0) / self.period_s)
        return int(round(k * self.period_s * self.power_W * 1000.0))

    def temperature_C(self) -> float:
        return 45.0

    def utilization_pct(self) -> tuple[float, float]:
        return 80.0, 40.0

    def clocks_MHz(self) -> dict:
        return {"sm": 1980.0, "mem": 3201.0}

    def throttle_reasons(self) -> str:
        return "none"

    def name(self) -> str:
        return "Fake GPU (CPU dry run)"

    def driver_version(self) -> str:
        return "fake"

    def power_limit_W(self) -> float:
        return 700.0

    def close(self) -> None:
        pass

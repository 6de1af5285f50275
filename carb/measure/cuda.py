"""The CUDA backend: the paper's Section 3.3 protocol on an NVIDIA GPU, through torch.cuda and NVML.

- energy: difference of NVML's total-energy counter (mJ -> J) around the timed loop, read right after
  a ``torch.cuda.synchronize()``; the loop is lengthened to ``min_window_s`` (see
  :class:`~carb.measure.base.Meter`);
- latency: mean per batch over the timed loop (wall clock between synchronizations); the per-batch
  spread ``latency_std_ms`` comes from CUDA events recorded between iterations (no extra syncs);
- peak memory: ``reset_peak_memory_stats`` then ``max_memory_allocated`` over one forward;
- temperature: mean of NVML readings before and after the timed loop;
- utilization: NVML SM and memory utilization sampled in a background thread while the model runs
  forward+backward in training mode for ``util_window_s``;
- kernel launches: device kernels seen by ``torch.profiler`` over one forward (host-side launch calls
  when the profiler sees no device kernels, said in ``missing_reason``);
- clocks: left alone unless ``measure.clocks.lock=true`` (then the previous state is restored on
  close, atexit and SIGTERM, see :class:`~carb.measure.nvml.NvmlDevice`; a refusal is a
  :class:`~carb.errors.ConfigError`). The SM / memory clocks and throttle reasons recorded per row are
  the ones read right after the timed loop (:meth:`CudaMeter.observed_clocks`);
- ``cudnn.benchmark`` off (restored on close); TF32 and cuDNN flags, application clocks, power limit
  and the device fingerprint (:func:`~carb.measure.fingerprint.gpu_fingerprint`) are device facts;
- every fallback (utilization in eval-mode batch norm, host-side kernel counts) is written to
  ``missing_reason`` through :meth:`CudaMeter.extra_reasons`.

The torch.cuda calls go through :class:`TorchCudaOps`, so tests can run the whole protocol on the
CPU with a fake ``ops`` and a mocked ``pynvml``.
"""
from __future__ import annotations

import gc
import math
import time
from typing import Any

from carb.errors import MeasurementError
from carb.measure.base import (
    MB,
    NAN,
    LoopTimer,
    MeasureSettings,
    Meter,
    forward_peak_MB,
    is_oom,
    knobs_of,
    torch_dtype,
)
from carb.measure.fingerprint import session_id
from carb.measure.nvml import NvmlDevice, UtilizationSampler


class _EventTimer(LoopTimer):
    def __init__(self, torch) -> None:
        super().__init__()
        self._torch = torch
        self._events: list[Any] = []

    def mark(self) -> None:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        self._events.append(ev)

    def intervals_ms(self) -> list[float]:
        return [float(a.elapsed_time(b)) for a, b in zip(self._events, self._events[1:])]


class TorchCudaOps:
    """The torch.cuda operations the meter needs, for one device index."""

    def __init__(self, index: int = 0) -> None:
        import torch

        if not torch.cuda.is_available():
            raise MeasurementError("device: cuda requested but torch.cuda.is_available() is False (no NVIDIA "
                                   "GPU, no driver, or a CPU-only torch build); use device=cpu")
        if index >= torch.cuda.device_count():
            raise MeasurementError(f"device.index: {index} is out of range; this machine has "
                                   f"{torch.cuda.device_count()} CUDA device(s)")
        self.torch = torch
        self.index = int(index)
        self.device = torch.device("cuda", self.index)
        torch.cuda.set_device(self.device)

    def uuid(self) -> str | None:
        try:
            return str(self.torch.cuda.get_device_properties(self.index).uuid)
        except Exception:  # noqa: BLE001 - older torch
            return None

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()

    def reset_peak(self) -> None:
        self.torch.cuda.reset_peak_memory_stats(self.device)

    def max_allocated_bytes(self) -> int:
        return int(self.torch.cuda.max_memory_allocated(self.device))

    def timer(self) -> LoopTimer:
        return _EventTimer(self.torch)

    #: ``"device"`` or ``"host"``: what the last :meth:`count_kernels` counted.
    last_count_source: str | None = None

    def count_kernels(self, fn) -> float:
        """Device kernels launched by ``fn()`` (torch.profiler, CUDA activity); when the profiler
        reports no device kernels, the host-side launch calls (``last_count_source = "host"``)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            self.sync()
        cuda_type = self.torch.autograd.DeviceType.CUDA
        n = 0
        launches = 0
        for e in prof.events():
            name = str(getattr(e, "name", ""))
            if getattr(e, "device_type", None) == cuda_type and not name.startswith(("Memcpy", "Memset")):
                n += 1
            elif name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx"):
                launches += 1
        self.last_count_source = "device" if n else ("host" if launches else None)
        return float(n or launches) if (n or launches) else NAN

    def facts(self) -> dict[str, Any]:
        t = self.torch
        p = t.cuda.get_device_properties(self.index)
        return {"device_name": t.cuda.get_device_name(self.index), "cuda_version": t.version.cuda,
                "cudnn_version": t.backends.cudnn.version(), "compute_capability": f"{p.major}.{p.minor}",
                "total_memory_MB": p.total_memory / MB, "multiprocessors": p.multi_processor_count,
                "torch_version": t.__version__}


class CudaMeter(Meter):
    """Measures on one NVIDIA GPU.

    settings: :class:`MeasureSettings` (or mapping). index: CUDA device index.
    nvml: pynvml module (injectable), ops: :class:`TorchCudaOps`-like object (injectable).
    Raises :class:`MeasurementError` when there is no usable GPU, or when the energy counter is
    missing and ``require_energy`` is set."""

    kind = "cuda"

    def __init__(self, settings: MeasureSettings | dict | None = None, index: int = 0, nvml: Any = None,
                 ops: Any = None) -> None:
        super().__init__(settings)
        import torch

        self._torch = torch
        self.ops = ops if ops is not None else TorchCudaOps(index)
        self.index = int(index)
        self._prev_benchmark = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = False
        self.nvml = NvmlDevice(index, uuid=self.ops.uuid(), nvml=nvml)
        self._util_reason: str | None = None
        self._last_clocks: dict[str, float] = {}
        self._last_throttle: str | None = None
        self._extra: dict[str, str] = {}
        self._kernel_reason: str | None = None
        try:
            ok, self._energy_reason = self.nvml.energy_support()
            if not ok and self.settings.require_energy:
                self.nvml.check_energy_support()
            self._energy_ok = ok
            self._clock_request = None
            if self.settings.lock_clocks:
                self._clock_request = self.nvml.lock_clocks(self.settings.sm_clock_MHz, self.settings.mem_clock_MHz)
            self._start_clocks = self.nvml.clocks_MHz()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if not self._closed:
            try:
                self.nvml.close()
            finally:
                self._torch.backends.cudnn.benchmark = self._prev_benchmark
        super().close()

    # ------------------------------------------------------------------ facts
    def device_facts(self) -> dict[str, Any]:
        f = dict(self.ops.facts())
        sm, mem = self.nvml.locked_clocks_MHz
        try:
            max_clk = self.nvml.max_clocks_MHz()
        except MeasurementError:
            max_clk = None
        try:
            from importlib.metadata import version

            import pynvml  # noqa: F401

            nvml_py = version("nvidia-ml-py")
        except Exception:  # noqa: BLE001
            nvml_py = None
        torch = self._torch
        try:
            app_clocks = self.nvml.application_clocks_MHz()
        except Exception:  # noqa: BLE001 - optional fact
            app_clocks = None
        f.update({
            "device_name": f.get("device_name") or self.nvml.name(), "device_kind": "cuda",
            "driver": self.nvml.driver_version(), "nvml_name": self.nvml.name(), "session_id": session_id(),
            "nvidia_ml_py": nvml_py, "cuda_index": self.index,
            "energy_counter": self._energy_ok, "energy_reason": self._energy_reason,
            "power_limit_W": self.nvml.power_limit_W(),
            "clocks": {"requested_sm_MHz": self.settings.sm_clock_MHz if self.settings.lock_clocks else None,
                       "requested_mem_MHz": self.settings.mem_clock_MHz if self.settings.lock_clocks else None,
                       "locked_sm_MHz": sm, "locked_mem_MHz": mem, "lock_reason": self.nvml.lock_reason,
                       "at_start": self._start_clocks, "max": max_clk, "application": app_clocks,
                       "previous": self.nvml.previous_clocks},
            "clocks_locked": sm is not None or mem is not None,
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
            "cudnn_enabled": bool(torch.backends.cudnn.enabled),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
            "threads": torch.get_num_threads(),
        })
        from carb.measure.fingerprint import device_id, gpu_fingerprint

        fp = gpu_fingerprint(f)
        f["fingerprint"] = fp
        f["device_id"] = device_id(fp)
        return f

    # ------------------------------------------------------------------ hooks
    def sync(self) -> None:
        self.ops.sync()

    def release(self) -> None:
        gc.collect()
        self.ops.empty_cache()

    def make_timer(self) -> LoopTimer:
        return self.ops.timer()

    def prepare(self, model, cfg: Any):
        self._extra = {}  # per measurement: fallbacks, clocks under load
        self._kernel_reason = None
        self._last_clocks = {}
        self._last_throttle = None
        batch, size, precision = knobs_of(cfg)
        dtype = torch_dtype(precision)
        model = model.to(device=self.ops.device, dtype=dtype).eval()
        x = self._torch.randn(batch, 3, size, size, dtype=dtype, device=self.ops.device)
        return model, x

    def energy_snapshot(self):
        return self.nvml.read_energy_mJ() if self._energy_ok else None

    def energy_since_J(self, snapshot) -> float:
        return NvmlDevice.energy_between_J(snapshot, self.nvml.read_energy_mJ())

    def energy_missing_reason(self) -> str | None:
        return self._energy_reason

    def read_temperature_C(self) -> float:
        return self.nvml.temperature_C()

    def after_timed_loop(self) -> None:
        try:
            self._last_clocks = self.nvml.clocks_MHz()
        except MeasurementError:
            self._last_clocks = {}
        self._last_throttle = self.nvml.throttle_reasons()

    def observed_clocks(self) -> dict[str, Any]:
        """SM / memory clocks (MHz) and throttle reasons read right after the timed loop."""
        return {"sm_clock_MHz": float(self._last_clocks.get("sm", NAN)),
                "mem_clock_MHz": float(self._last_clocks.get("mem", NAN)),
                "throttle_reasons": self._last_throttle}

    def extra_reasons(self) -> dict[str, str]:
        return dict(self._extra)

    def peak_memory_MB(self, model, x) -> float:
        return forward_peak_MB(self.ops, model, x)

    def kernel_launches(self, model, x) -> float:
        try:
            n = self.ops.count_kernels(lambda: model(x))
            if getattr(self.ops, "last_count_source", None) == "host" and not math.isnan(n):
                self._extra["kernel_launches"] = ("no CUDA kernel events from the profiler; counted "
                                                  "host-side cudaLaunchKernel calls")
            return n
        except MeasurementError:
            raise
        except Exception as e:  # noqa: BLE001 - the profiler is optional
            if is_oom(e):
                raise
            self._kernel_reason = f"torch.profiler failed: {' '.join(str(e).split())[:200]}"
            return NAN

    def kernel_launches_missing_reason(self) -> str | None:
        return self._kernel_reason or "torch.profiler reported no CUDA kernels"

    def utilization(self, model, x) -> tuple[float, float]:
        """SM and memory utilization (%) sampled over ``util_window_s`` of training-mode
        forward+backward. A training-mode failure (out of memory, batch norm on a 1x1 map with batch
        1) falls back to batch norm in eval mode once (the reason goes to :meth:`extra_reasons`), then
        gives NaN with the reason."""
        torch = self._torch
        s = self.settings
        self._util_reason = None
        xt = x.detach()
        params = [p for p in model.parameters()]
        train_msg = ""

        def step() -> None:
            out = model(xt)
            out.float().sum().backward()
            for p in params:
                p.grad = None

        try:
            for bn_eval in (False, True):
                model.train()
                if bn_eval:
                    for m in model.modules():
                        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                            m.eval()
                try:
                    with torch.enable_grad():
                        step()
                        self.sync()
                        sampler = UtilizationSampler(self.nvml, s.util_interval_s).start()
                        try:
                            t_end = time.perf_counter() + s.util_window_s
                            while time.perf_counter() < t_end:
                                step()
                            self.sync()
                        finally:
                            sm, mem, n = sampler.stop()
                    if n == 0:
                        self._util_reason = "no NVML utilization samples in the window"
                    if bn_eval:
                        why = (f"training-mode window failed ({train_msg}), measured with batch norm in "
                               f"eval mode")
                        self._extra["avg_sm_util"] = why
                        self._extra["avg_mem_util"] = why
                    return sm, mem
                except MeasurementError:
                    raise
                except Exception as e:  # noqa: BLE001
                    msg = " ".join(str(e).split())[:200]
                    if is_oom(e):
                        self._util_reason = f"training-mode window ran out of memory ({msg})"
                        break
                    if bn_eval:
                        self._util_reason = (f"training-mode window failed ({train_msg}); with batch norm "
                                             f"in eval mode too ({msg})")
                    train_msg = msg
                    continue
            return NAN, NAN
        finally:
            for p in params:
                p.grad = None
            model.eval()
            self.release()

    def utilization_missing_reason(self) -> str | None:
        return self._util_reason

    def locked_clocks_MHz(self) -> tuple[float, float]:
        sm, mem = self.nvml.locked_clocks_MHz
        return (float(sm) if sm is not None else NAN, float(mem) if mem is not None else NAN)

    def clocks_missing_reason(self) -> str | None:
        if not self.settings.lock_clocks:
            return None
        reason = self.nvml.lock_reason
        if reason and self._last_clocks:
            reason += (f"; SM {self._last_clocks.get('sm', math.nan):.0f} MHz, memory "
                       f"{self._last_clocks.get('mem', math.nan):.0f} MHz after the timed loop")
        return reason

    def threads(self) -> float:
        return float(self._torch.get_num_threads())


def energy_update_period_under_load(index: int = 0, seconds: float = 3.0) -> dict[str, Any]:
    """Measure how often the NVML total-energy counter changes while the GPU runs a matmul loop in a
    background thread (an idle GPU's counter can advance slowly). Returns the dict of
    :func:`carb.measure.nvml.measure_energy_update_period` plus the device name."""
    import threading

    import torch

    from carb.measure.nvml import NvmlDevice, measure_energy_update_period

    if not torch.cuda.is_available():
        raise MeasurementError("device: the energy update period needs a CUDA device; none is available")
    dev = torch.device("cuda", index)
    stop = threading.Event()

    def load() -> None:
        a = torch.randn(4096, 4096, device=dev)
        while not stop.is_set():
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize(dev)

    th = threading.Thread(target=load, daemon=True)
    th.start()
    try:
        with NvmlDevice(index) as nv:
            time.sleep(0.5)
            res = measure_energy_update_period(nv, seconds=seconds)
            res["device_name"] = nv.name()
            res["driver"] = nv.driver_version()
    finally:
        stop.set()
        th.join(timeout=10)
    return res

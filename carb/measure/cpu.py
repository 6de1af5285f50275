"""The CPU backend: latency, peak tensor memory and (where readable) RAPL package energy.

Peak memory: the peak of the bytes held by live tensor storages during one no-grad forward,
plus the storages alive when it starts (parameters, buffers, input), in MB (2**20 bytes). This is what
``reset_peak_memory_stats`` + ``max_memory_allocated`` reports on a GPU (the caching allocator's
allocated bytes, params included), so CPU and GPU rows mean the same thing.

How: :class:`PeakTensorMemory`, a ``TorchDispatchMode`` that sees every aten op's outputs, registers
each new storage once (keyed by its storage identity, so views and in-place ops are not counted twice)
with its ``nbytes()``, and subtracts it from the live total when the storage dies (a ``weakref`` on
the storage object, which torch keeps tied to the C++ storage). Why this and not the alternatives:

- ``torch.profiler(profile_memory=True)`` also reports allocations, but costs a full profiled
  forward, gives per-op deltas that must be replayed, and reports allocator requests that include
  temporary allocations;
- process RSS (``/proc/self/status``) is dominated by the allocator's and oneDNN's caches and
  freed-but-kept pages, so it barely moves with the model;
- the dispatch mode is exact for tensors, independent of the allocator, deterministic, and cheap (a
  Python callback per op, a few hundred per ResNet forward).

What it does not see: scratch buffers that kernels (oneDNN convolution workspaces) allocate
internally without making a tensor. That memory is transient and not what the GPU counter's
``max_memory_allocated`` for activations is about either.

Contention guard: :class:`CpuContentionProbe` brackets every timed window with the process's CPU
time (``time.process_time``) and the machine's steal time (``/proc/stat``): ``cpu_share`` = CPU seconds
/ (wall seconds x threads), ``steal_share`` = stolen seconds / (wall seconds x online CPUs). The base
protocol repeats a window below ``guard.min_cpu_share`` or above ``guard.max_steal_share`` (see
:class:`carb.measure.base.Meter`).

Fingerprint: ``device_facts()["fingerprint"]`` is :func:`carb.measure.fingerprint.read_cpu_fingerprint`
(vendor, family/model/stepping, kernel-selecting ISA flags, cores, threads, hypervisor).

Allocator: with ``measure.malloc_mmap_threshold_MB`` set (the ``cpu`` protocol: 1024), :func:`pin_malloc`
raises glibc's mmap threshold for the measuring process, so tensors of 32 MiB and more keep their
pages between forwards instead of being page-faulted and zeroed on each one (a 2-3x latency cliff on
this project's CPU reference VM, whose size also depended on the kernel's huge-page mode). The
allocator settings and the huge-page mode are in the device facts.

Threads: ``torch.set_num_threads(settings.threads)`` (all cores this process may use when None),
recorded in every row (``threads``) and in the device facts, and restored on :meth:`CpuMeter.close`.
Utilization, temperature and kernel launches are GPU quantities: NaN with the reason.
"""
from __future__ import annotations

import os
import platform
import time
import weakref
from typing import Any

from carb.measure.base import MB, NAN, ContentionProbe, MeasureSettings, Meter, knobs_of, torch_dtype
from carb.measure.fingerprint import device_id, read_cpu_fingerprint, session_id
from carb.measure.rapl import RaplReader

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_steal_s(stat_path: str = "/proc/stat") -> float:
    """Steal time of all CPUs since boot, seconds (the 8th value of the ``cpu`` line); NaN when
    unreadable (not Linux)."""
    try:
        with open(stat_path) as f:
            for line in f:
                if line.startswith("cpu "):
                    parts = line.split()
                    return float(parts[8]) / _CLK_TCK if len(parts) > 8 else NAN
    except OSError:
        pass
    return NAN


class CpuContentionProbe(ContentionProbe):
    """Started at construction; :meth:`stop` gives ``(cpu_share, steal_share)`` over the window.

    threads: the threads the process measures with (the CPU time it should get per wall second)."""

    def __init__(self, threads: int, stat_path: str = "/proc/stat") -> None:
        self.threads = max(int(threads), 1)
        self.stat_path = stat_path
        self.online = os.cpu_count() or 1
        self._cpu0 = time.process_time()
        self._steal0 = read_steal_s(stat_path)

    def stop(self, wall_s: float) -> tuple[float, float]:
        cpu = time.process_time() - self._cpu0
        steal = read_steal_s(self.stat_path) - self._steal0
        if wall_s <= 0:
            return NAN, NAN
        return cpu / (wall_s * self.threads), max(steal, 0.0) / (wall_s * self.online)


def _make_tracker_class():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class PeakTensorMemory(TorchDispatchMode):
        """Tracks the peak bytes of live tensor storages created while the mode is active.

        ``known`` storages (alive before, e.g. parameters) are never counted. After the block,
        ``peak_bytes`` is the maximum of ``live_bytes`` (bytes of storages created inside and still
        alive) reached at any op boundary."""

        def __init__(self, known: set[int] | None = None) -> None:
            super().__init__()
            self.known = set(known or ())
            self.live_bytes = 0
            self.peak_bytes = 0
            self._refs: dict[int, Any] = {}

        def _freed(self, key: int, nbytes: int) -> None:
            if self._refs.pop(key, None) is not None:
                self.live_bytes -= nbytes

        def _track(self, t) -> None:
            if t.device.type == "meta":
                return
            st = t.untyped_storage()
            key = st._cdata
            if key in self.known or key in self._refs:
                return
            n = int(st.nbytes())
            self._refs[key] = weakref.ref(st, lambda _r, key=key, n=n: self._freed(key, n))
            self.live_bytes += n
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            import torch

            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self._track(t)
            return out

    return PeakTensorMemory


_TRACKER = None


def peak_tensor_memory_class():
    """The :class:`PeakTensorMemory` dispatch mode class (created lazily: importing this module does
    not import torch)."""
    global _TRACKER
    if _TRACKER is None:
        _TRACKER = _make_tracker_class()
    return _TRACKER


def live_storage_bytes(*tensors_or_modules) -> tuple[int, set[int]]:
    """Bytes and identities of the distinct storages of the given tensors and modules' parameters and
    buffers."""
    import torch

    seen: dict[int, int] = {}
    for obj in tensors_or_modules:
        ts = ([*obj.parameters(), *obj.buffers()] if isinstance(obj, torch.nn.Module) else [obj])
        for t in ts:
            st = t.untyped_storage()
            seen.setdefault(st._cdata, int(st.nbytes()))
    return sum(seen.values()), set(seen)


#: ``mallopt`` parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def transparent_hugepage() -> str | None:
    """The kernel's transparent-huge-page mode (``always`` | ``madvise`` | ``never``), None if unreadable."""
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return None
    inside = text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()
    return inside or None


def pin_malloc(mmap_threshold_MB: int, libc_name: str = "libc.so.6") -> dict[str, Any]:
    """Set glibc's mmap threshold to ``mmap_threshold_MB`` (and the trim threshold to twice it) for
    this process, so that tensors below it are served from the heap and keep their pages between
    forwards. Why: by default glibc maps every allocation of 32 MiB or more with ``mmap`` and unmaps
    it when freed, so a convolution output that large is page-faulted and zeroed on every forward.
    Measured on the CPU reference VM (basic-56 width 0.25 at 224 px, fp32, batch 16): 663 ms and
    about 1 GB of page faults per forward by default, 250 ms and none with the threshold at 1 GB;
    how much of that cliff a run shows also depends on the kernel's huge-page mode, so a measurement
    either pins the allocator or records that it did not.

    Returns ``{"mmap_threshold_MB", "trim_threshold_MB"}``. Raises :class:`MeasurementError` when
    the C library has no ``mallopt`` or refuses the value."""
    import ctypes

    from carb.errors import MeasurementError

    try:
        libc = ctypes.CDLL(libc_name)
        mallopt = libc.mallopt
    except (OSError, AttributeError) as e:
        raise MeasurementError(f"measure.malloc_mmap_threshold_MB: this C library has no mallopt ({e}); "
                               f"set it to null") from None
    mmap_b, trim_b = int(mmap_threshold_MB) * 2**20, 2 * int(mmap_threshold_MB) * 2**20
    if mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_b)) != 1 or mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(trim_b)) != 1:
        raise MeasurementError(f"measure.malloc_mmap_threshold_MB: glibc refused {mmap_threshold_MB} MB; "
                               f"allowed: null or a smaller value")
    return {"mmap_threshold_MB": int(mmap_threshold_MB), "trim_threshold_MB": 2 * int(mmap_threshold_MB)}


def cpu_model_name() -> str:
    """The processor's model name (``/proc/cpuinfo``), or ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class CpuMeter(Meter):
    """Measures on the CPU. See the module docstring for what each column means here."""

    kind = "cpu"

    def __init__(self, settings: MeasureSettings | dict | None = None, rapl: RaplReader | None = None) -> None:
        super().__init__(settings)
        import torch

        self._torch = torch
        self._prev_threads = torch.get_num_threads()
        self._threads = int(self.settings.threads or usable_cores())
        torch.set_num_threads(self._threads)
        self.rapl = rapl if rapl is not None else RaplReader(self.settings.rapl_root)
        m = self.settings.malloc_mmap_threshold_MB
        self.malloc_ = pin_malloc(m) if m is not None else {"mmap_threshold_MB": None, "trim_threshold_MB": None}

    def close(self) -> None:
        if not self._closed:
            self._torch.set_num_threads(self._prev_threads)
        super().close()

    def device_facts(self) -> dict[str, Any]:
        t = self._torch
        fp = read_cpu_fingerprint(self._threads)
        return {
            "fingerprint": fp, "device_id": device_id(fp),
            "device_name": cpu_model_name(), "device_kind": "cpu",
            "driver": f"linux-{platform.release()}" if platform.system() == "Linux" else platform.platform(),
            "session_id": session_id(),
            "torch_version": t.__version__, "cuda_version": None, "cudnn_version": None,
            "cpu_model": cpu_model_name(), "logical_cores": os.cpu_count(), "usable_cores": usable_cores(),
            "threads": self._threads, "interop_threads": t.get_num_interop_threads(),
            "mkldnn": bool(t.backends.mkldnn.is_available()),
            "python": platform.python_version(), "platform": platform.platform(),
            "rapl_available": self.rapl.available, "rapl_reason": self.rapl.reason,
            "rapl_domains": [d.name for d in self.rapl.domains],
            "clocks": None, "clocks_locked": False,
            "malloc": {**self.malloc_, "default": self.malloc_["mmap_threshold_MB"] is None},
            "transparent_hugepage": transparent_hugepage(),
        }

    def threads(self) -> float:
        return float(self._threads)

    def contention_probe(self) -> CpuContentionProbe:
        return CpuContentionProbe(self._threads)

    def prepare(self, model, cfg: Any):
        batch, size, precision = knobs_of(cfg)
        dtype = torch_dtype(precision)
        model = model.to(dtype=dtype).eval()
        x = self._torch.randn(batch, 3, size, size, dtype=dtype)
        return model, x

    # energy -------------------------------------------------------------
    def energy_snapshot(self):
        if not self.rapl.available:
            return None
        try:
            return self.rapl.read_energy_uj()
        except OSError:
            return None

    def energy_since_J(self, snapshot) -> float:
        try:
            return self.rapl.energy_between_J(snapshot, self.rapl.read_energy_uj())
        except OSError:
            return NAN

    def energy_missing_reason(self) -> str | None:
        return self.rapl.reason or "RAPL counter could not be read during the loop"

    # memory -------------------------------------------------------------
    def peak_memory_MB(self, model, x) -> float:
        base_bytes, known = live_storage_bytes(model, x)
        tracker = peak_tensor_memory_class()(known)
        with tracker:
            out = model(x)
        del out
        return (base_bytes + tracker.peak_bytes) / MB

    def temperature_missing_reason(self) -> str | None:
        return "no GPU on a cpu device"

    def kernel_launches_missing_reason(self) -> str | None:
        return "no GPU on a cpu device"

    def utilization_missing_reason(self) -> str | None:
        return "no GPU on a cpu device"

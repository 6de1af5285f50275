"""Model-zoo networks by name: torchvision's image classifiers and timm's backbones as ``nn.Module``
(random weights, eval mode, on the meta device by default), their family, and the one place that makes
torchvision importable on the CPU wheel of torch.

Names. ``"tv:<name>"`` (or ``"torchvision:<name>"``) is a torchvision classification model
(``torchvision.models.list_models(module=torchvision.models)``, e.g. ``tv:mobilenet_v3_large``);
``"timm:<name>"`` (or ``"timm/<name>"``) a timm model (``timm:ghostnet_100``; a pretrained tag such as
``resnet50.a1_in1k`` is dropped: weights are random). A bare name resolves torchvision's classifiers
first, then timm (``resnet50`` is torchvision's; ``timm:resnet50`` is timm's, the same layers).

torchvision on the CPU wheel. The registry's torchvision wheel is built for CUDA torch: its C++
extension does not load on the CPU wheel, and ``import torchvision`` then fails with "operator
torchvision::nms does not exist" (its fake-tensor registrations need the operators' schemas).
:func:`import_torchvision` loads the extension if it can and otherwise defines the two schemas the
import needs (``torchvision::nms``, ``torchvision::qnms``; no kernels: detection ops stay unusable,
classification models need none), before the first import; idempotent. Everything in CARB that imports
torchvision goes through it.

Torch, torchvision and timm are imported inside the functions (importing this module loads none).
"""
from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carb.errors import ZooError

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

#: The operator schemas ``import torchvision`` needs when its C++ extension does not load
#: (torchvision/_meta_registrations.py registers fake kernels for them at import).
TORCHVISION_OPS: dict[str, str] = {
    "torchvision::nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::qnms": "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
}
#: Name prefixes -> library.
PREFIXES: dict[str, str] = {"tv:": "tv", "torchvision:": "tv", "torchvision/": "tv",
                            "torchvision.models.": "tv", "timm:": "timm", "timm/": "timm"}
#: Weight-source prefixes of timm names dropped before reading a family (``tf_efficientnet_b0`` is an
#: efficientnet).
FAMILY_PREFIXES: tuple[str, ...] = ("tf_", "tv_", "tv2_", "gluon_", "legacy_", "ssl_", "swsl_", "ig_")
#: Families whose name's leading letters are not the family (``wide_resnet50_2`` -> ``wide_resnet``).
FAMILY_ALIASES: dict[str, str] = {"wide": "wide_resnet", "regnetx": "regnet", "regnety": "regnet", "regnetz": "regnet"}
DEVICES: tuple[str, ...] = ("meta", "cpu")


def _has_op(qualified: str) -> bool:
    """Whether the dispatcher knows the operator ``namespace::name`` (default overload)."""
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(qualified, "")
        return True
    except RuntimeError:
        return False


def _load_torchvision_extension() -> None:
    """Load torchvision's C++ extension (``torchvision/_C*.so``) when it matches this torch; a mismatch
    (the CUDA build on the CPU wheel) is ignored: :func:`import_torchvision` then defines the schemas."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise ZooError("model library: torchvision is not installed; install it with `pip install -e .[zoo]` "
                       "(the Makefile does: TORCHVISION ?= torchvision==0.28.0, matching TORCH)")
    for folder in spec.submodule_search_locations:
        for lib in sorted(Path(folder).glob("_C.*")):
            if lib.suffix in (".so", ".pyd", ".dylib"):
                try:
                    torch.ops.load_library(str(lib))
                except (OSError, ImportError, RuntimeError):
                    pass


def import_torchvision() -> Any:
    """``import torchvision``, working on the CPU wheel of torch too: the operator schemas of
    :data:`TORCHVISION_OPS` that neither torch nor torchvision's extension provides are defined first
    (``torch.library.define``). Idempotent; returns the module. Raises :class:`ZooError` (one line)
    when torchvision is not installed or still fails to import."""
    if "torchvision" in sys.modules and hasattr(sys.modules["torchvision"], "models"):
        return sys.modules["torchvision"]
    import torch

    if not all(_has_op(op) for op in TORCHVISION_OPS):
        _load_torchvision_extension()
    for op, schema in TORCHVISION_OPS.items():
        if not _has_op(op):
            torch.library.define(op, schema)
    if "torchvision" in sys.modules:   # a failed earlier import left a partial module: start again
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
    try:
        import torchvision
    except (ImportError, RuntimeError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ZooError(f"model library: torchvision fails to import on torch {torch.__version__}: {msg}") from None
    return torchvision


def import_timm() -> Any:
    """``import timm`` (which imports torchvision when present: after :func:`import_torchvision`)."""
    if importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
    try:
        import timm
    except ImportError:
        raise ZooError("model library: timm is not installed; install it with `pip install -e .[zoo]`") from None
    return timm


def split_name(name: str) -> tuple[str | None, str]:
    """``(library, base name)`` of a model name: library ``"tv"``, ``"timm"`` or None (a bare name), the
    base name without prefix and without a timm pretrained tag (``timm:resnet50.a1_in1k`` ->
    ``("timm", "resnet50")``)."""
    if not isinstance(name, str) or not name.strip():
        raise ZooError(f"model: {name!r} is not a model name; give e.g. 'tv:mobilenet_v3_large' or 'timm:ghostnet_100'")
    s = name.strip()
    lib = None
    for prefix, which in PREFIXES.items():
        if s.startswith(prefix):
            lib, s = which, s[len(prefix):]
            break
    return lib, s.split(".", 1)[0]


@functools.lru_cache(maxsize=1)
def _torchvision_classifiers() -> frozenset[str]:
    """torchvision's image-classification model names."""
    tv = import_torchvision()
    return frozenset(tv.models.list_models(module=tv.models))


@functools.lru_cache(maxsize=1)
def _torchvision_other_tasks() -> dict[str, str]:
    """torchvision's non-classification model names -> their task (detection, segmentation, ...)."""
    tv = import_torchvision()
    out = {}
    for task in ("detection", "segmentation", "video", "optical_flow", "quantization"):
        for n in tv.models.list_models(module=getattr(tv.models, task)):
            out.setdefault(n, task)
    return out


def resolve(name: str) -> tuple[str, str]:
    """``(library, base name)`` a model name builds from: a prefixed name's library, a bare name
    torchvision's classifiers first, then timm's models. Raises :class:`ZooError` (one line) for an
    unknown name or a non-classification (non-vision-backbone) model."""
    lib, base = split_name(name)
    if lib in (None, "tv"):
        if base in _torchvision_classifiers():
            return "tv", base
        task = _torchvision_other_tasks().get(base)
        if task is not None:
            raise ZooError(f"model {name!r}: a torchvision {task} model, not an image-classification backbone; "
                           "the zoo takes classifiers (torchvision.models.list_models(module=torchvision.models)) "
                           "and timm models")
        if lib == "tv":
            raise ZooError(f"model {name!r}: unknown torchvision classifier; allowed: "
                           f"torchvision.models.list_models(module=torchvision.models){closest(base, 'tv')}")
    timm = import_timm()
    if timm.is_model(base):
        return "timm", base
    if lib == "timm":
        raise ZooError(f"model {name!r}: unknown model; allowed: timm models (timm.list_models()){closest(base, lib)}")
    raise ZooError(f"model {name!r}: unknown model; allowed: torchvision classifiers ('tv:<name>') or timm "
                   f"models ('timm:<name>', timm.list_models()){closest(base, lib)}")


def closest(base: str, lib: str | None) -> str:
    """``"; closest: tv:resnet50, ..."``: up to three names of ``lib`` (``tv``, ``timm``; None: both) that
    read like the unknown ``base`` (difflib), as a suffix of the unknown-name line; ``""`` when none does."""
    import difflib

    names = [f"tv:{n}" for n in sorted(_torchvision_classifiers())] if lib in (None, "tv") else []
    if lib in (None, "timm"):
        names += [f"timm:{n}" for n in import_timm().list_models()]
    by_base = {n.split(":", 1)[1]: n for n in reversed(names)}   # torchvision's wins a name both have
    near = difflib.get_close_matches(base, list(by_base), n=3, cutoff=0.75)
    return f"; closest: {', '.join(by_base[n] for n in near)}" if near else ""


def build_model(name: str, *, device: str = "meta", **kwargs: Any) -> nn.Module:
    """The network ``name`` (see the module docstring) with random weights, in eval mode, on ``device``
    (``"meta"``: no memory allocated, for tracing; ``"cpu"``: real fp32 weights, for measuring).
    ``kwargs`` go to the constructor (``num_classes=10``, timm's ``drop_path_rate=...``). A model whose
    constructor cannot run on the meta device is built on the CPU and moved. Raises :class:`ZooError`
    (one line naming the model and the reason) for an unknown or non-vision name or refused settings."""
    import torch

    if device not in DEVICES:
        raise ZooError(f"device: {device!r} is not allowed; allowed: {list(DEVICES)}")
    lib, base = resolve(name)
    if lib == "tv":
        make = lambda: _quiet_init(import_torchvision().models.get_model, base, weights=None, **kwargs)  # noqa: E731
    else:
        timm = import_timm()
        make = lambda: timm.create_model(base, pretrained=False, **kwargs)  # noqa: E731
    try:
        if device == "meta":
            try:
                with torch.device("meta"), _skip_init()():
                    model = make()
            except (TypeError, ValueError):
                raise
            except Exception:   # a constructor that reads tensor values (.item()): build on the CPU, move
                model = make().to("meta")
        else:
            with torch.device("cpu"):
                model = make()
    except (TypeError, ValueError, AssertionError, RuntimeError, KeyError) as e:
        raise ZooError(f"model {name!r}: the constructor refuses {kwargs or 'its defaults'}: "
                       f"{_one_line(e)}") from None
    return model.eval()


def _quiet_init(get_model: Any, base: str, **kwargs: Any) -> Any:
    """``get_model(base, **kwargs)`` without torchvision's FutureWarning that the default weight initialisation
    of inception_v3 / googlenet will change: CARB's weights are random and their values cost nothing."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The default weight initialization", category=FutureWarning)
        return get_model(base, **kwargs)


#: In-place value updates that weight initialisation runs; on meta tensors they change nothing, so a
#: meta build skips them (torch would still run their Python meta kernels: half the build time).
_INIT_OPS = frozenset({"normal_", "uniform_", "fill_", "zero_", "erfinv_", "mul_", "add_", "sub_", "div_", "clamp_",
                       "clamp_min_", "clamp_max_", "copy_", "exponential_", "bernoulli_", "random_", "log_normal_",
                       "addcmul_", "addcdiv_", "sqrt_", "neg_", "abs_", "exp_", "fmod_", "remainder_", "lerp_",
                       "trunc_normal_", "masked_fill_"})


@functools.lru_cache(maxsize=1)
def _skip_init() -> type:
    """A dispatch mode (class, made on first use) that returns the tensor of an :data:`_INIT_OPS` call on
    meta tensors without running it."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class SkipInit(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if (func.overloadpacket.__name__ in _INIT_OPS and args and isinstance(args[0], torch.Tensor)
                    and args[0].device.type == "meta"):
                return args[0]
            return func(*args, **(kwargs or {}))

    return SkipInit


def _one_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when empty), at most 200 characters."""
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:200]


def family_of(name: str) -> str:
    """The family of a model name: the leading letters of its base name (the rule Hidden Joules and timm
    comparisons use), after dropping a weight-source prefix (:data:`FAMILY_PREFIXES`) and mapping
    :data:`FAMILY_ALIASES`, and a version suffix ``v<digit>`` (``mobilenetv3`` -> ``mobilenet``):
    ``tv:mobilenet_v3_large`` and ``timm:mobilenetv3_large_100`` -> ``mobilenet``,
    ``timm:tf_efficientnetv2_s.in1k`` -> ``efficientnet``, ``wide_resnet50_2`` -> ``wide_resnet``,
    ``regnety_040`` -> ``regnet``, ``seresnext50_32x4d`` -> ``seresnext``.
    Pure string work (no import)."""
    _, base = split_name(name)
    base = base.lower()
    for prefix in FAMILY_PREFIXES:
        if base.startswith(prefix):
            base = base[len(prefix):]
            break
    m = re.match(r"[a-z]+", base)
    if m is None:
        raise ZooError(f"model {name!r}: no family (the name does not start with letters)")
    family = m.group(0)
    if family.endswith("v") and base[len(family):][:1].isdigit() and len(family) > 2:
        family = family[:-1]   # a version suffix: timm's mobilenetv3 is torchvision's mobilenet_v3
    return FAMILY_ALIASES.get(family, family)


_import_timm = import_timm   # the name of the first commit

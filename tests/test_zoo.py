"""carb.design.zoo: torchvision imports on this torch (the CPU-wheel fix, in a fresh interpreter, twice),
zoo names build the same networks as torchvision / timm themselves (parameter counts on the meta device
equal those of the CPU build), families read off names, and bad names are one-line ZooErrors."""
from __future__ import annotations

import subprocess
import sys

import pytest

from carb.design import zoo
from carb.errors import CarbError, ZooError


def test_torchvision_imports_in_a_fresh_interpreter_and_the_fix_is_idempotent():
    code = ("import sys\n"
            "from carb.design.zoo import import_torchvision\n"
            "assert 'torch' not in sys.modules\n"
            "tv = import_torchvision(); tv2 = import_torchvision()\n"
            "assert tv is tv2 and tv is sys.modules['torchvision']\n"
            "import torch\n"
            "m = tv.models.resnet18().eval()\n"
            "print(sum(p.numel() for p in m.parameters()), m(torch.zeros(1, 3, 32, 32)).shape[-1])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    params, classes = map(int, out.stdout.split())
    assert classes == 1000 and 11_000_000 < params < 12_000_000


def test_import_after_a_failed_plain_import_still_works():
    """A user's own ``import torchvision`` failed first (CPU wheel): the fix starts the import again."""
    code = ("try:\n    import torchvision\nexcept Exception:\n    pass\n"
            "from carb.design.zoo import import_torchvision\n"
            "print(len(import_torchvision().models.list_models()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) > 50


@pytest.mark.parametrize("name", ["tv:mobilenet_v3_large", "resnet18", "timm:ghostnet_100",
                                  "timm:resnet18.a1_in1k", "tv:squeezenet1_0"])
def test_meta_build_has_the_libraries_parameter_count(name):
    import torch

    lib, base = zoo.resolve(name)
    if lib == "tv":
        ref = zoo.import_torchvision().models.get_model(base, weights=None)
    else:
        import timm

        ref = timm.create_model(base, pretrained=False)
    meta = zoo.build_model(name)
    assert all(p.device.type == "meta" for p in meta.parameters())
    assert not meta.training
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in ref.parameters())
    cpu = zoo.build_model(name, device="cpu")
    assert next(cpu.parameters()).device == torch.device("cpu")


def test_constructor_settings_pass_through():
    m = zoo.build_model("tv:resnet18", num_classes=10)
    assert m.fc.out_features == 10


def test_bare_names_resolve_torchvision_first():
    assert zoo.resolve("resnet50") == ("tv", "resnet50")
    assert zoo.resolve("timm:resnet50.a1_in1k") == ("timm", "resnet50")
    assert zoo.resolve("ghostnet_100") == ("timm", "ghostnet_100")


@pytest.mark.parametrize("name,family", [
    ("tv:mobilenet_v3_large", "mobilenet"), ("timm:tf_efficientnet_b0.in1k", "efficientnet"),
    ("wide_resnet50_2", "wide_resnet"), ("timm:seresnext50_32x4d", "seresnext"), ("resnext50_32x4d", "resnext"),
    ("regnet_y_400mf", "regnet"), ("timm/vit_small_patch16_224.augreg_in21k", "vit"),
    ("timm:mobilenetv3_large_100", "mobilenet"), ("timm:tf_efficientnetv2_s.in1k", "efficientnet"),
    ("timm:regnety_040", "regnet"), ("timm:levit_128s", "levit"), ("timm:convnextv2_atto", "convnext"),
])
def test_family_of(name, family):
    assert zoo.family_of(name) == family


@pytest.mark.parametrize("name,reason", [
    ("no_such_net", "unknown model"), ("fasterrcnn_resnet50_fpn", "detection model"),
    ("tv:ghostnet_100", "unknown torchvision classifier"), ("", "not a model name"),
])
def test_bad_names_are_one_line_errors(name, reason):
    with pytest.raises(ZooError, match=reason) as e:
        zoo.build_model(name)
    assert isinstance(e.value, CarbError) and "\n" not in str(e.value)


def test_refused_settings_name_the_model():
    with pytest.raises(ZooError, match=r"model 'resnet18': the constructor refuses"):
        zoo.build_model("resnet18", num_classes="ten")
    with pytest.raises(ZooError, match="device"):
        zoo.build_model("resnet18", device="cuda")


def test_building_inception_prints_no_torchvision_init_warning():
    """torchvision warns that inception_v3's default initialisation will change; CARB's weights are random and
    the warning, printed in the middle of carb-train / carb-screen's output, told a user nothing."""
    import warnings

    from carb.design.zoo import build_model

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_model("tv:inception_v3")
    assert not [w for w in caught if "weight initialization" in str(w.message)], [str(w.message) for w in caught]

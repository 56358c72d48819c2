"""Every reproduction's ``run(mode, seed, cfg)`` runs the caller's configuration (the README's
method template): the first experiment call receives ``cfg`` itself, not the mode's default."""

from __future__ import annotations

import importlib
from dataclasses import fields, replace

import pytest


class _Reached(Exception):
    pass


# module -> (config class, the first experiment function run() calls with the config first)
CASES = {
    "clic": ("CLICReproConfig", "_one_seed"),
    "combo": ("ComboReproConfig", "_one_seed"),
    "fedphoenix": ("FedPhoenixReproConfig", "_one_seed"),
    "fingerprint": ("FingerprintReproConfig", "experiment"),
    "hawaii": ("HawaiiReproConfig", "_one_seed"),
    "lasq": ("LASQReproConfig", "_one_seed"),
    "lcotta": ("LCoTTAReproConfig", "_one_seed"),
    "moric": ("MoRICReproConfig", "contour_experiment"),
    "panlut": ("PanLUTReproConfig", "_one_seed"),
    "rankmatch": ("RankMatchReproConfig", "_one_seed"),
    "robia": ("RobIAReproConfig", "_one_seed"),
    "svip": ("SVIPReproConfig", "_one_seed"),
    "tensor_compress": ("TensorCompressReproConfig", "experiment"),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", ["quick", "full"])
def test_run_uses_the_callers_config(name, mode, monkeypatch):
    mod = importlib.import_module(f"eff_vision.reproduce.{name}")
    cls_name, fn = CASES[name]
    cls = getattr(mod, cls_name)
    seen = []

    def stop(cfg, *args, **kwargs):
        seen.append(cfg)
        raise _Reached

    monkeypatch.setattr(mod, fn, stop)
    with pytest.raises(_Reached):
        mod.run(mode, 3)
    default = seen.pop()
    assert isinstance(default, cls)
    # the mode's default with an integer field moved by one
    mine = None
    for f in fields(cls):
        if type(getattr(default, f.name)) is int:
            try:
                mine = replace(default, **{f.name: getattr(default, f.name) + 1})
                break
            except ValueError:  # a field tied to another (e.g. a scene's size)
                continue
    assert mine != default
    with pytest.raises(_Reached):
        mod.run(mode, 3, mine)
    assert seen == [mine]


def test_tensor_compress_config_keeps_its_former_name():
    from eff_vision.reproduce import tensor_compress as tc

    assert tc.TensorCompressConfig is tc.TensorCompressReproConfig

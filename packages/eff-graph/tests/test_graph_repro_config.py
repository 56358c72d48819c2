"""The reproductions' configs: validated, and the defaults are run_seed's / run_world's own."""

from __future__ import annotations

import inspect

import pytest

from eff_graph.reproduce import imgda, remindrag


def test_imgda_config_defaults_are_run_seeds_and_run_passes_it(monkeypatch):
    params = inspect.signature(imgda.run_seed).parameters
    assert imgda.ImGDAReproConfig().run_kwargs() == {
        k: params[k].default for k in ("num_classes", "imbalance", "epochs", "shift")
    }
    seen = []

    def stop(seed, methods, **kw):
        seen.append(kw)
        raise RuntimeError("reached")

    monkeypatch.setattr(imgda, "run_seed", stop)
    cfg = imgda.ImGDAReproConfig(num_classes=4, imbalance=10.0, epochs=7, shift="structure")
    with pytest.raises(RuntimeError, match="reached"):
        imgda.run("quick", 0, cfg)
    assert seen == [cfg.run_kwargs()]


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"num_classes": 1}, ValueError, "num_classes"),
        ({"num_classes": 2.0}, TypeError, "num_classes"),
        ({"imbalance": 0.0}, ValueError, "imbalance"),
        ({"epochs": 0}, ValueError, "epochs"),
        ({"shift": "label"}, ValueError, "shift"),
    ],
)
def test_imgda_config_rejects_bad_values(kw, err, match):
    with pytest.raises(err, match=match):
        imgda.ImGDAReproConfig(**kw)


def test_remindrag_config_defaults_are_run_worlds_and_run_passes_it(monkeypatch):
    params = inspect.signature(remindrag.run_world).parameters
    kw = remindrag.ReMindRAGReproConfig().world_kwargs()
    assert kw["hops"] == params["hops"].default and kw["max_jumps"] == params["max_jumps"].default
    assert kw["world"] == {} and remindrag.ReMindRAGReproConfig().hash_dim == remindrag.HASH_DIM
    seen = []

    def stop(seed, embedder, systems=None, **kw):
        seen.append((embedder.dim, kw))
        raise RuntimeError("reached")

    monkeypatch.setattr(remindrag, "run_world", stop)
    cfg = remindrag.ReMindRAGReproConfig(
        hops=(2, 4), max_jumps=12, world=remindrag.scaled_world(2), hash_dim=512
    )
    with pytest.raises(RuntimeError, match="reached"):
        remindrag.run("quick", 0, cfg)
    assert seen == [(512, cfg.world_kwargs())]


@pytest.mark.parametrize(
    ("kw", "err", "match"),
    [
        ({"hops": ()}, ValueError, "hops"),
        ({"hops": (1, 2)}, ValueError, "hops"),
        ({"max_jumps": 0}, ValueError, "max_jumps"),
        ({"hash_dim": 1.5}, TypeError, "hash_dim"),
    ],
)
def test_remindrag_config_rejects_bad_values(kw, err, match):
    with pytest.raises(err, match=match):
        remindrag.ReMindRAGReproConfig(**kw)

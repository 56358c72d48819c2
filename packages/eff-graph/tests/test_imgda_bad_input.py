"""ImGDA never answers silently wrong: unfitted models, NaN features and a wrong dtype raise."""

import pytest
import torch

from eff_graph.imgda import ImGDA

SMALL = {"hidden_channels": 16, "anchors_per_class": 10, "epochs": 2}


def test_predict_before_fit_raises(small_pair):
    _, target = small_pair
    with pytest.raises(RuntimeError, match="before fit"):
        ImGDA(16, 3, **SMALL).predict(target)


@pytest.mark.parametrize("which", ["source", "target"])
def test_nan_feature_raises_naming_the_graph(small_pair, which):
    source, target = (g.clone() for g in small_pair)
    graph = source if which == "source" else target
    graph.x[3, 1] = float("nan")
    with pytest.raises(ValueError, match=rf"{which}\.x holds NaN or inf values \(in 1 nodes\)"):
        ImGDA(16, 3, **SMALL).fit(source, target)


def test_float64_features_raise_a_dtype_error_with_the_fix(small_pair):
    source, target = (g.clone() for g in small_pair)
    source.x = source.x.double()
    with pytest.raises(TypeError, match=r"source\.x must have the model's dtype torch\.float32"):
        ImGDA(16, 3, **SMALL).fit(source, target)
    model = ImGDA(16, 3, **SMALL).fit(small_pair[0], small_pair[1])
    target64 = target.clone()
    target64.x = target64.x.to(torch.float64)
    with pytest.raises(TypeError, match=r"target\.x"):
        model.predict(target64)
    assert model.predict(target).shape == (target.num_nodes,)


@pytest.mark.parametrize("offsets", [False, True])
def test_state_dict_round_trip_gives_the_same_predictions(small_pair, tmp_path, offsets):
    source, target = small_pair
    kw = {**SMALL, "source_offsets": offsets}
    model = ImGDA(16, 3, seed=3, **kw).fit(source, target)
    assert isinstance(model, torch.nn.Module)
    torch.save(model.state_dict(), tmp_path / "imgda.pt")
    fresh = ImGDA(16, 3, seed=99, **kw)  # different init: everything must come from the file
    fresh.load_state_dict(torch.load(tmp_path / "imgda.pt"))
    assert torch.equal(fresh.predict(target), model.predict(target))
    model.eval()  # no dropout: compare the deterministic embeddings
    fresh.eval()
    with torch.no_grad():
        z = model.encoder(target.x, target.edge_index, branch="global")
        z2 = fresh.encoder(target.x, target.edge_index, branch="global")
    assert torch.equal(z, z2)
    assert ("offsets.0" in model.state_dict()) is offsets

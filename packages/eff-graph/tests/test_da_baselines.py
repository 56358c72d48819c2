import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from eff_graph._gnn import grad_reverse
from eff_graph.da import DANNGCN, UDAGCN, ClassBalancedGCN, GCNBaselineConfig, SourceOnlyGCN

FAST = {"hidden_channels": 16, "epochs": 15}


def test_gradient_reversal_scales_and_flips_the_gradient():
    x = torch.randn(5, 3, requires_grad=True)
    (grad_reverse(x, 0.1) * torch.arange(3.0)).sum().backward()
    assert torch.allclose(x.grad, -0.1 * torch.arange(3.0).expand(5, 3))


def test_class_balanced_loss_weights_by_inverse_frequency(small_pair):
    source, _ = small_pair
    model = ClassBalancedGCN(16, 3, **FAST)
    model.encoder.eval()  # no dropout: both losses see the same embeddings
    counts = torch.bincount(source.y).float()
    logits = model.classifier(model._embed(source))
    want = F.cross_entropy(logits, source.y, weight=counts.sum() / (3 * counts))
    got = model._loss(source, source, 0, 1)["ce"]
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    # differs from the unweighted source-only loss on an imbalanced source
    assert float(got.detach()) != pytest.approx(
        float(F.cross_entropy(logits, source.y).detach()), rel=1e-3
    )


@pytest.mark.parametrize("cls", [SourceOnlyGCN, ClassBalancedGCN, DANNGCN, UDAGCN])
def test_baselines_are_deterministic_and_ignore_target_labels(cls, small_pair):
    source, target = small_pair
    unlabeled = Data(x=target.x, edge_index=target.edge_index)
    a = cls(16, 3, seed=1, **FAST).fit(source, target).predict(target)
    b = cls(16, 3, seed=1, **FAST).fit(source, unlabeled).predict(unlabeled)
    assert torch.equal(a, b) and a.shape == (target.num_nodes,)


def test_dann_trains_its_domain_classifier_and_needs_the_target(small_pair):
    source, target = small_pair
    model = DANNGCN(16, 3, seed=0, grl_weight=0.1, **FAST)
    with pytest.raises(ValueError, match="needs the unlabelled target"):
        model.fit(source)
    before = [p.detach().clone() for p in model.domain.parameters()]
    model.fit(source, target)
    assert set(model.history[0]) == {"ce", "domain"}
    assert any(
        not torch.equal(p0, p1) for p0, p1 in zip(before, model.domain.parameters(), strict=True)
    )
    with pytest.raises(ValueError, match="grl_weight"):
        DANNGCN(16, 3, grl_weight=-1.0)


def test_baseline_config_and_input_errors(small_pair):
    source, target = small_pair
    with pytest.raises(ValueError, match="dropout"):
        GCNBaselineConfig(dropout=1.0)
    with pytest.raises(ValueError, match="epochs"):
        GCNBaselineConfig(epochs=0)
    with pytest.raises(TypeError, match="unknown GCNBaselineConfig"):
        SourceOnlyGCN(16, 3, width=3)
    with pytest.raises(ValueError, match="feature dimensions differ"):
        SourceOnlyGCN(16, 3).fit(source, Data(x=target.x[:, :4], edge_index=target.edge_index))
    with pytest.raises(ValueError, match="labels outside"):
        SourceOnlyGCN(16, 2).fit(source, target)

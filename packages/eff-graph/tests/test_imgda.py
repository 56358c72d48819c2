import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.transforms import GDC

from eff_graph._gnn import GCNStack, gcn_operator, make_operator
from eff_graph.data import csbm_domain_pair
from eff_graph.imgda import (
    DualBranchEncoder,
    ImGDA,
    ImGDAConfig,
    class_prototypes,
    class_temperatures,
    cross_branch_prototype_loss,
    cross_domain_contrastive_loss,
    degree_anchors,
    ppmi_operator,
    ppr_operator,
    ppr_topk,
)
from eff_graph.metrics import macro_f1

SMALL = {"hidden_channels": 16, "anchors_per_class": 10, "epochs": 20}


def _random_graph(n: int, p: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.rand(n, n, generator=g) < p, 1)
    ei = upper.nonzero().T
    return torch.cat([ei, ei.flip(0)], 1)


def _dense(ei: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
    m = torch.zeros(n, n, dtype=torch.float64)
    m[ei[0], ei[1]] = w.double()
    return m


# ------------------------------------------------------------------ operators
def test_ppr_topk_agrees_with_pyg_gdc():
    n = 40
    ei = _random_graph(n, 0.12, seed=0)
    for k in (8, n):
        gdc = GDC(
            self_loop_weight=1, normalization_in="sym", normalization_out=None,
            diffusion_kwargs={"method": "ppr", "alpha": 0.15},
            sparsification_kwargs={"method": "topk", "k": k, "dim": 1}, exact=True,
        )  # fmt: skip
        ref = gdc(Data(edge_index=ei.clone(), num_nodes=n))
        ours = _dense(*ppr_topk(ei, n, alpha=0.15, topk=k), n)
        theirs = _dense(ref.edge_index, ref.edge_attr, n)
        if k == n:
            assert torch.allclose(ours, theirs, atol=1e-5)
        # row-wise top-k values agree (robust to ties between equal PPR entries)
        top_ours = ours.sort(dim=1, descending=True).values[:, :k]
        top_theirs = theirs.sort(dim=1, descending=True).values[:, :k]
        assert torch.allclose(top_ours, top_theirs, atol=1e-5)


def test_ppr_operator_is_symmetric_non_negative_with_self_loops():
    n = 30
    ei = _random_graph(n, 0.1, seed=1)
    ei = ei[:, (ei < n - 1).all(0)]  # node n-1 isolated
    idx, w = ppr_operator(ei, n, alpha=0.15, topk=4)
    s = _dense(idx, w, n)
    assert torch.allclose(s, s.T, atol=1e-6)
    assert float(w.min()) >= 0
    assert bool((s.diagonal() > 0).all())
    # entries are exactly the union of the row-wise top-k supports, plus the diagonal
    topk = _dense(*ppr_topk(ei, n, 0.15, 4), n) > 0
    support = topk | topk.T | torch.eye(n, dtype=torch.bool)
    assert torch.equal(s > 0, support)
    # re-normalised: D^{-1/2} S D^{-1/2} has spectral radius 1 (row sums of S as D)
    assert float(torch.linalg.eigvalsh(s).max()) == pytest.approx(1.0, abs=1e-6)


def test_ppr_bad_arguments():
    ei = _random_graph(10, 0.3, 0)
    for alpha in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="ppr_alpha"):
            ppr_operator(ei, 10, alpha=alpha)
    with pytest.raises(ValueError, match="topk"):
        ppr_operator(ei, 10, topk=0)
    with pytest.raises(ValueError, match="outside"):
        ppr_operator(torch.tensor([[0, 12], [1, 0]]), 10)


def test_ppmi_operator_matches_the_formula_in_expectation_and_is_seeded():
    # 6-cycle plus a chord (0, 3): walks of length 1 visit each neighbour with P(b|a) = 1/deg(a)
    edges = [(i, (i + 1) % 6) for i in range(6)] + [(0, 3)]
    ei = torch.tensor(edges).T
    n = 6
    adj = np.zeros((n, n))
    for a, b in edges:
        adj[a, b] = adj[b, a] = 1
    deg = adj.sum(1)
    p = adj / deg[:, None]
    w = np.where(adj > 0, np.log(np.where(adj > 0, p, 1) / p.sum(0)[None, :] * n / 1), 0.0)
    w += np.eye(n)  # self-loops of weight 1 (no walk of length 1 returns to its start)
    dis = w.sum(1) ** -0.5
    expected = dis[:, None] * w * dis[None, :]
    idx, got = ppmi_operator(
        ei, n, walks_per_node=4000, max_walk_len=1, generator=torch.Generator().manual_seed(0)
    )
    assert np.allclose(_dense(idx, got, n).numpy(), expected, atol=0.03)

    g = _random_graph(80, 0.06, 2)

    def op(seed):
        return _dense(
            *ppmi_operator(g, 80, max_walk_len=2, generator=torch.Generator().manual_seed(seed)), 80
        )

    a, b, c = op(5), op(5), op(6)
    assert torch.count_nonzero(a) > 80
    assert torch.equal(a, b) and not torch.equal(a, c)


# ------------------------------------------------------------------ encoder
def test_gcn_stack_propagation_equals_pyg_gcnconv():
    torch.manual_seed(0)
    n = 20
    ei, ew = gcn_operator(_random_graph(n, 0.2, 3), n)
    stack = GCNStack(5, 4, num_layers=1, dropout=0.0)
    x = torch.randn(n, 5)
    conv: GCNConv = stack.convs[0]
    assert torch.allclose(stack(x, make_operator(ei, ew, n)), conv(x, ei, ew), atol=1e-6)
    # gradients through the custom backward match autograd through GCNConv
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    stack(x1, make_operator(ei, ew, n)).square().sum().backward()
    conv(x2, ei, ew).square().sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5)


def test_dual_branch_encoder_shares_weights_and_caches_operators(small_pair):
    source, _ = small_pair
    enc = DualBranchEncoder(16, 8, dropout=0.0)
    single = GCNStack(16, 8)
    assert sum(p.numel() for p in enc.parameters()) == sum(p.numel() for p in single.parameters())
    zl = enc(source.x, source.edge_index, branch="local")
    zg = enc(source.x, source.edge_index, branch="global")
    assert not torch.allclose(zl, zg)
    assert torch.allclose(enc(source.x, source.edge_index, branch="both"), zl + zg)
    op = enc.operator(source.edge_index, source.num_nodes, "global")
    assert enc.operator(source.edge_index.clone(), source.num_nodes, "global") is op
    with torch.no_grad():
        enc.stack.convs[1].lin.weight.mul_(2.0)
    assert torch.allclose(
        enc(source.x, source.edge_index, branch="local"),
        2 * zl - enc.stack.convs[1].bias,
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="branch"):
        enc(source.x, source.edge_index, branch="middle")


# ------------------------------------------------------------------ anchors, temperatures, losses
def test_degree_anchors_are_top_k_by_degree_with_ties_by_node_id():
    # star on 0 (degree 4), 1-2 edge; 5 isolated
    ei = torch.tensor([[0, 0, 0, 0, 1], [1, 2, 3, 4, 2]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    y = torch.tensor([1, 0, 0, 0, 0, 1])
    anchors = degree_anchors(ei, y, 2)
    assert anchors[0].tolist() == [1, 2]  # degree 2, 2 beat degree 1 (nodes 3, 4)
    assert anchors[1].tolist() == [0, 5]
    assert degree_anchors(ei, y, 10)[0].tolist() == [1, 2, 3, 4]
    assert len(degree_anchors(ei, y, 1, num_classes=3)[2]) == 0
    with pytest.raises(ValueError, match="k must"):
        degree_anchors(ei, y, 0)


def test_class_temperatures_follow_the_formula():
    counts = torch.tensor([400, 189, 89, 42, 20])
    tau = class_temperatures(counts, tau0=0.5)
    assert torch.allclose(tau.double(), 0.5 + 0.5 * counts.double() / 400)
    assert float(tau[0]) == pytest.approx(1.0) and float(tau[-1]) == pytest.approx(0.525)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="tau0"):
            class_temperatures(counts, tau0=bad)


def test_prototypes_from_anchors_differ_from_all_nodes_only_when_k_below_class_size():
    torch.manual_seed(0)
    z, y = torch.randn(30, 4), torch.tensor([0] * 20 + [1] * 10)
    anchors = [torch.arange(5), torch.arange(20, 30)]
    pa, pall = class_prototypes(z, y, anchors, "anchors"), class_prototypes(z, y, anchors, "all")
    assert not torch.allclose(pa[0], pall[0])  # 5 anchors < 20 nodes
    assert torch.allclose(pa[1], pall[1])  # every node of class 1 is an anchor
    assert torch.allclose(pa[0], z[:5].mean(0))


def _ref_cross_branch(zl, zg, y, al, ag, tau, prototypes):
    zs, anchors, total, c_count = {"l": zl, "g": zg}, {"l": al, "g": ag}, 0.0, len(al)
    for b in "lg":
        for b2 in "lg":
            for c in range(c_count):
                members = anchors[b][c] if prototypes == "anchors" else (y == c).nonzero().flatten()
                p = F.normalize(zs[b][members].mean(0), dim=0)
                sims = torch.exp(F.normalize(zs[b2], dim=1) @ p / tau[c])
                total = total - torch.log(sims[anchors[b2][c]] / sims.sum()).mean()
    return total / (4 * c_count)


def test_cross_branch_prototype_loss_equals_the_loop_formula():
    torch.manual_seed(1)
    y = torch.tensor([0] * 12 + [1] * 7 + [2] * 4)
    zl, zg = torch.randn(23, 6), torch.randn(23, 6)
    al = [torch.tensor([0, 3, 5]), torch.tensor([12, 13]), torch.tensor([19, 20, 21, 22])]
    ag = [torch.tensor([1, 2]), torch.tensor([14, 15, 18]), torch.tensor([20])]
    tau = class_temperatures(torch.bincount(y), 0.5)
    for mode in ("anchors", "all"):
        got = cross_branch_prototype_loss(zl, zg, y, al, ag, tau, mode)
        assert float(got) == pytest.approx(
            float(_ref_cross_branch(zl, zg, y, al, ag, tau, mode)), rel=1e-5
        )
    with pytest.raises(ValueError, match="prototypes"):
        cross_branch_prototype_loss(zl, zg, y, al, ag, tau, "some")


def _ref_votes(zt, zs, ys, anchors):
    a = torch.cat(anchors)
    cos = F.normalize(zt, dim=1) @ F.normalize(zs[a], dim=1).T
    votes = torch.softmax(cos, 1) @ F.one_hot(ys[a], len(anchors)).float()
    conf, pseudo = votes.max(1)
    return a, cos, conf, pseudo


def _ref_infonce(zt, zs, ys, anchors, temp, frac):
    a, cos, conf, pseudo = _ref_votes(zt, zs, ys, anchors)
    losses = []
    for c in range(len(anchors)):
        idx = (pseudo == c).nonzero().flatten()
        if len(idx) == 0:
            continue
        top = idx[torch.argsort(conf[idx], descending=True)][: math.ceil(frac * len(idx))]
        for i in top:
            pos = torch.exp(cos[i][ys[a] == c] / temp).sum()
            losses.append(-torch.log(pos / torch.exp(cos[i] / temp).sum()))
    return torch.stack(losses).mean(), sum(
        math.ceil(frac * int((pseudo == c).sum())) for c in range(len(anchors))
    )


def _ref_official(zt, zs, ys, anchors):
    """The release's per-class loop (temperature 1)."""
    a, _, _, pseudo = _ref_votes(zt, zs, ys, anchors)
    loss = 0.0
    for c in range(len(anchors)):
        t_nodes = (pseudo == c).nonzero().squeeze(1)
        if t_nodes.numel() == 0:
            continue
        s_nodes = [int(n) for n in a if int(ys[n]) == c]
        sim = torch.exp(F.normalize(zt[t_nodes], dim=1) @ F.normalize(zs[s_nodes], dim=1).T)
        target_loss = -torch.log(sim / sim.sum(1, keepdim=True)).mean(1)
        loss = loss + target_loss.mean() / target_loss.size(0)
    return loss


def test_cross_domain_losses_equal_their_loop_formulas():
    torch.manual_seed(2)
    ys = torch.tensor([0] * 10 + [1] * 6 + [2] * 5)
    zs, zt = torch.randn(21, 5), torch.randn(40, 5)
    anchors = [torch.tensor([0, 1, 2, 3]), torch.tensor([10, 11, 12]), torch.tensor([16, 17])]
    got = cross_domain_contrastive_loss(zt, zs, ys, anchors, temperature=0.5, select_frac=0.3)
    ref, _ = _ref_infonce(zt, zs, ys, anchors, 0.5, 0.3)
    assert float(got) == pytest.approx(float(ref), rel=1e-5)
    off = cross_domain_contrastive_loss(zt, zs, ys, anchors, temperature=1.0, mode="official")
    assert float(off) == pytest.approx(float(_ref_official(zt, zs, ys, anchors)), rel=1e-5)
    # the released term is minimised by *uniform* similarity to the class's anchors: with identical
    # anchors per class it sits at its lower bound sum_c log(K_c) / n_c whatever the target embedding
    same = zs.clone()
    for a in anchors:
        same[a] = zs[a[0]]
    _, _, _, pseudo = _ref_votes(zt, same, ys, anchors)
    bound = sum(
        math.log(len(a)) / int((pseudo == c).sum())
        for c, a in enumerate(anchors)
        if (pseudo == c).any()
    )
    got = cross_domain_contrastive_loss(zt, same, ys, anchors, 1.0, mode="official")
    assert float(got) == pytest.approx(bound, rel=1e-5)
    with pytest.raises(ValueError, match="select_frac"):
        cross_domain_contrastive_loss(zt, zs, ys, anchors, select_frac=0.0)
    with pytest.raises(ValueError, match="mode"):
        cross_domain_contrastive_loss(zt, zs, ys, anchors, mode="other")
    with pytest.raises(ValueError, match="class c"):
        cross_domain_contrastive_loss(zt, zs, ys, [anchors[1], anchors[0], anchors[2]])


# ------------------------------------------------------------------ config and model
@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("hidden_channels", 0, "hidden_channels"),
        ("anchors_per_class", 0, "anchors_per_class"),
        ("topk", 0, "topk"),
        ("ppr_alpha", 1.0, "ppr_alpha"),
        ("ppr_alpha", 0.0, "ppr_alpha"),
        ("tau0", 0.0, "tau0"),
        ("tau0", 1.2, "tau0"),
        ("select_frac", 0.0, "select_frac"),
        ("select_frac", 1.5, "select_frac"),
        ("cd_start", -0.1, "cd_start"),
        ("cd_start", 1.1, "cd_start"),
        ("global_op", "pagerank", r"global_op must be one of \['ppr', 'ppmi'\]"),
        ("prototypes", "median", r"prototypes must be one of \['anchors', 'all'\]"),
        ("cross_domain", "mmd", r"cross_domain must be one of \['infonce', 'official'\]"),
        ("dropout", 1.0, "dropout"),
        ("lr", 0.0, "lr"),
    ],
)
def test_config_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        ImGDAConfig(**{field: value})


def test_imgda_is_deterministic_and_never_reads_target_labels(small_pair):
    source, target = small_pair
    a = ImGDA(16, 3, **SMALL, seed=7).fit(source, target).predict(target)
    unlabeled = Data(x=target.x, edge_index=target.edge_index)
    b = ImGDA(16, 3, **SMALL, seed=7).fit(source, unlabeled).predict(unlabeled)
    assert torch.equal(a, b)
    c = ImGDA(16, 3, **SMALL, seed=8).fit(source, target).predict(target)
    assert not torch.equal(a, c)


def test_imgda_learns_an_easy_transfer_and_schedules_the_cross_domain_term():
    source, target = csbm_domain_pair(
        num_classes=3, num_features=16, imbalance=4.0, source_max=80, target_per_class=50,
        mean_scale=1.2, feature_shift=0.0, mean_noise=0.0, noise=(1.0, 1.0), p_in=(0.1, 0.1),
        p_out=0.01, seed=0,
    )  # fmt: skip
    model = ImGDA(16, 3, **{**SMALL, "epochs": 30}, seed=0).fit(source, target)
    assert macro_f1(model.predict(target), target.y) > 0.85
    assert [("cd" in h) for h in model.history] == [e >= 15 for e in range(30)]
    assert all(np.isfinite(h["loss"]) for h in model.history)
    assert model.history[-1]["ce"] < model.history[0]["ce"]


def test_imgda_release_settings_and_ppmi_operator_run(small_pair):
    source, target = small_pair
    model = ImGDA(16, 3, **SMALL, seed=0, prototypes="all", cross_domain="official",
                  source_offsets=True, cd_start=0.0, global_op="ppmi")  # fmt: skip
    assert model.offsets is None  # created by fit: one row per source node and layer
    model.fit(source, target)
    assert model.offsets is not None and len(model.offsets) == 2
    assert model.offsets[0].shape == (source.num_nodes, 16)
    assert all("cd" in h for h in model.history)
    assert model.predict(target).shape == (target.num_nodes,)


def test_imgda_bad_inputs(small_pair):
    source, target = small_pair
    model = ImGDA(16, 3, **SMALL)
    with pytest.raises(ValueError, match="feature dimensions differ"):
        model.fit(source, Data(x=target.x[:, :8], edge_index=target.edge_index))
    with pytest.raises(ValueError, match=r"labels outside \[0, 3\)"):
        model.fit(Data(x=source.x, edge_index=source.edge_index, y=source.y + 1), target)
    bad_edges = source.edge_index.clone()
    bad_edges[0, 0] = source.num_nodes + 5
    with pytest.raises(ValueError, match="outside"):
        model.fit(Data(x=source.x, edge_index=bad_edges, y=source.y), target)
    no_class_2 = source.y.clone()
    no_class_2[no_class_2 == 2] = 1
    with pytest.raises(ValueError, match="class 2 has no nodes"):
        model.fit(Data(x=source.x, edge_index=source.edge_index, y=no_class_2), target)
    with pytest.raises(TypeError, match="unknown ImGDAConfig"):
        ImGDA(16, 3, hidden=4)
    with pytest.raises(ValueError, match="tau0"):
        ImGDA(16, 3, tau0=2.0)
    with pytest.raises(ValueError, match="features"):
        model.predict(Data(x=target.x[:, :8], edge_index=target.edge_index))

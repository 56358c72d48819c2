import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from eff_rl.cka_rl import CKAPolicy, FuseLinear, KnowledgePool
from eff_rl.envs import cartpole_task
from eff_rl.ppo import ContinualPPO


def _delta(seed, shapes=(("fc1.weight", (3, 2)), ("fc1.bias", (3,)))):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(*s, generator=g) for k, s in shapes}


# ------------------------------------------------------------------ FuseLinear
def test_effective_weight_is_theta_plus_mixed_taus_and_taus_get_no_gradient():
    torch.manual_seed(0)
    layer = FuseLinear(4, 3, name="fc")
    base = {"weight": torch.randn(3, 4), "bias": torch.randn(3)}
    taus = {"weight": torch.randn(2, 3, 4), "bias": torch.randn(2, 3)}
    layer.set_pool(base, taus)
    alpha, s = (
        torch.tensor([0.3, -0.7], requires_grad=True),
        torch.tensor([1.5], requires_grad=True),
    )
    mix = torch.softmax(alpha * s, 0)
    w, b = layer.effective_weight(mix)
    torch.testing.assert_close(
        w, base["weight"] + mix[0] * taus["weight"][0] + mix[1] * taus["weight"][1]
    )
    torch.testing.assert_close(
        b, base["bias"] + mix[0] * taus["bias"][0] + mix[1] * taus["bias"][1]
    )
    x = torch.randn(5, 4)
    layer(x, mix).sum().backward()
    assert layer.weight.grad is not None and alpha.grad is not None and s.grad is not None
    assert not layer.tau_weight.requires_grad and layer.tau_weight.grad is None
    assert "tau_weight" in dict(layer.named_buffers()) and "tau_weight" not in dict(
        layer.named_parameters()
    )


def test_set_pool_rejects_shape_mismatch_naming_the_layer():
    layer = FuseLinear(4, 3, name="fc1")
    with pytest.raises(ValueError, match="layer fc1: base weight"):
        layer.set_pool(
            {"weight": torch.zeros(4, 3), "bias": torch.zeros(3)},
            {"weight": torch.zeros(1, 3, 4), "bias": torch.zeros(1, 3)},
        )
    with pytest.raises(ValueError, match="layer fc1: tau bias"):
        layer.set_pool(
            {"weight": torch.zeros(3, 4), "bias": torch.zeros(3)},
            {"weight": torch.zeros(1, 3, 4), "bias": torch.zeros(1, 4)},
        )


# ------------------------------------------------------------------ KnowledgePool
@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 9), st.sampled_from(["task", "tensor"]), st.integers(0, 1000)
)
def test_pool_never_exceeds_its_bound(pool_size, n_tasks, scope, seed):
    pool = KnowledgePool(pool_size, merge_scope=scope)
    one = _delta(seed)
    for k in range(n_tasks):
        pool.add(k, _delta(seed + k + 1))
        pool.merge_if_needed()
        assert len(pool) <= pool_size
        assert pool.nbytes <= pool_size * sum(t.numel() * 4 for t in one.values())
    assert len(pool) == min(n_tasks, pool_size)


@pytest.mark.parametrize("scope", ["task", "tensor"])
def test_merge_replaces_the_most_similar_pair_by_its_mean(scope):
    a = {"w": torch.tensor([1.0, 0.0, 0.0])}
    b = {"w": torch.tensor([0.0, 1.0, 0.0])}
    c = {"w": torch.tensor([0.9, 0.1, 0.0])}  # most similar to a
    pool = KnowledgePool(2, merge_scope=scope)
    for k, v in enumerate([a, b, c]):
        pool.add(k, v)
    # front insertion: order is [c, b, a]; the pair (c, a) = indices (0, 2) merges
    merged = pool.merge_if_needed()
    assert merged == [(0, 2)]
    assert len(pool) == 2
    torch.testing.assert_close(pool.vectors[0]["w"], b["w"])
    torch.testing.assert_close(pool.vectors[1]["w"], (a["w"] + c["w"]) / 2)


def test_zero_vector_has_similarity_zero_and_beats_a_conflicting_pair():
    # Task 1's delta is exactly 0; two conflicting deltas (cosine -1) lose to a pair with the zero vector.
    pool = KnowledgePool(2)
    pool.add(0, {"w": torch.zeros(3)})
    pool.add(1, {"w": torch.tensor([1.0, 2.0, 0.0])})
    pool.add(2, {"w": torch.tensor([-1.0, -2.0, 0.0])})
    ((i, j),) = pool.merge_if_needed()
    assert 2 in (i, j)  # index 2 is the zero vector (inserted first)
    norms = sorted(float(v["w"].norm()) for v in pool.vectors)
    assert norms[0] == pytest.approx(math.sqrt(5) / 2) and norms[1] == pytest.approx(math.sqrt(5))


def test_tensor_scope_merges_each_tensor_on_its_own():
    pool = KnowledgePool(2, merge_scope="tensor")
    vs = [
        {"a": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0, 1.0])},
        {"a": torch.tensor([0.0, 1.0]), "b": torch.tensor([0.1, 1.0])},
        {"a": torch.tensor([1.0, 0.1]), "b": torch.tensor([1.0, 0.0])},
    ]
    for k, v in enumerate(vs):
        pool.add(k, v)
    merged = pool.merge_if_needed()
    # order [v2, v1, v0]: for "a" the similar pair is (v2, v0) = (0, 2); for "b" it is (v1, v0) = (1, 2)
    assert merged == [(0, 2), (1, 2)]
    task_scope = KnowledgePool(2, merge_scope="task")
    for k, v in enumerate(vs):
        task_scope.add(k, v)
    assert len(task_scope.merge_if_needed()) == 1


def test_pool_state_dict_roundtrip_and_errors():
    pool = KnowledgePool(3)
    pool.add(0, _delta(1))
    pool.add(1, _delta(2))
    other = KnowledgePool(3)
    other.load_state_dict(pool.state_dict())
    assert other.sources == pool.sources
    for x, y in zip(other.vectors, pool.vectors, strict=True):
        for k in x:
            torch.testing.assert_close(x[k], y[k])
    with pytest.raises(ValueError, match=r"layer fc1\.weight"):
        pool.add(2, {"fc1.weight": torch.zeros(2, 2), "fc1.bias": torch.zeros(3)})
    for bad in (0, -1):
        with pytest.raises(ValueError, match=r"pool_size must be an integer in \[1, inf\]"):
            KnowledgePool(bad)
    for bad in (1.5, True):  # a wrong type is a TypeError
        with pytest.raises(TypeError, match="pool_size must be an int"):
            KnowledgePool(bad)
    with pytest.raises(ValueError, match=r"merge_scope must be one of \['task', 'tensor'\]"):
        KnowledgePool(2, merge_scope="layer")  # type: ignore[arg-type]


# ------------------------------------------------------------------ CKAPolicy
def test_begin_task_restarts_theta_from_base_and_shares_alpha():
    torch.manual_seed(0)
    pol = CKAPolicy(4, 2, width=8)
    base = {k: v.detach().clone() for k, v in pol.theta().items()}
    with torch.no_grad():
        for p in pol.theta().values():
            p.add_(1.0)  # "training" moves θ away from the base
    pool = KnowledgePool(3)
    pool.add(0, pol.end_task(base))
    pool.add(1, {k: torch.randn_like(v) for k, v in base.items()})
    pol.begin_task(pool, base)
    for k, v in pol.theta().items():
        torch.testing.assert_close(v.detach(), base[k])
    assert pol.alpha.shape == (2,) and pol.alpha_scale.item() == 1.0
    # one α for both fused layers: the mix in each layer is softmax(α·s)
    assert pol.fc1.n_vectors == pol.fc2.n_vectors == 2
    obs = torch.randn(3, 4)
    mix = pol.mixing_weights
    h = torch.tanh(pol.fc1(pol.encoder(obs), mix))
    torch.testing.assert_close(pol.logits(obs), pol.fc2(h, mix))
    torch.testing.assert_close(
        pol.end_task(base)["fc1.weight"], torch.zeros_like(base["fc1.weight"])
    )


def test_policy_errors():
    with pytest.raises(ValueError, match="alpha_init"):
        CKAPolicy(4, 2, alpha_init="gauss")  # type: ignore[arg-type]
    for bad in (0.0, 1.0, 1.2):
        with pytest.raises(ValueError, match="alpha_major"):
            CKAPolicy(4, 2, alpha_major=bad)
    pool = KnowledgePool(2)
    pool.add(0, {"fc1.weight": torch.zeros(64, 64)})
    with pytest.raises(RuntimeError, match="θ_base"):
        CKAPolicy(4, 2).begin_task(pool, None)


@pytest.mark.parametrize(("init", "expected"), [("uniform", [0.5, 0.5, 0.5]), ("major", None)])
def test_alpha_inits(init, expected):
    pol = CKAPolicy(4, 2, width=8, alpha_init=init, alpha_major=0.6)
    base = {k: v.detach().clone() for k, v in pol.theta().items()}
    pool = KnowledgePool(5)
    for k in range(3):
        pool.add(k, {n: torch.randn_like(v) for n, v in base.items()})
    pol.begin_task(pool, base)
    w = pol.mixing_weights.detach()
    if init == "uniform":
        torch.testing.assert_close(w, torch.full((3,), 1 / 3))
    else:
        torch.testing.assert_close(w, torch.tensor([0.6, 0.2, 0.2]))


def test_alpha_is_optimised_only_when_asked():
    torch.manual_seed(0)
    pol = CKAPolicy(4, 2, width=8)
    base = {k: v.detach().clone() for k, v in pol.theta().items()}
    pool = KnowledgePool(3)
    for k in range(2):
        pool.add(k, {n: 0.5 * torch.randn_like(v) for n, v in base.items()})
    for train_alpha in (False, True):
        pol.begin_task(pool, base)
        before = pol.alpha.detach().clone(), pol.alpha_scale.detach().clone()
        ContinualPPO(
            lambda n: cartpole_task(num_envs=n), pol, n_envs=2, n_steps=32, train_alpha=train_alpha
        ).learn(128)
        changed = not torch.equal(before[0], pol.alpha.detach()) or not torch.equal(
            before[1], pol.alpha_scale.detach()
        )
        assert changed is train_alpha


def test_forward_is_deterministic_given_parameters():
    torch.manual_seed(1)
    pol = CKAPolicy(4, 2)
    obs = torch.randn(7, 4)
    logits, value = pol(obs)
    assert logits.shape == (7, 2) and value.shape == (7,)
    assert np.isfinite(logits.detach().numpy()).all()


def test_frozen_weights_give_the_same_logits_and_are_released():
    torch.manual_seed(2)
    pol = CKAPolicy(4, 2, width=8)
    base = {k: v.detach().clone() for k, v in pol.theta().items()}
    pool = KnowledgePool(3)
    for k in range(2):
        pool.add(k, {n: torch.randn_like(v) for n, v in base.items()})
    pol.begin_task(pool, base)
    obs = torch.randn(5, 4)
    expected = pol.logits(obs).detach()
    with pol.frozen_weights():
        torch.testing.assert_close(pol.logits(obs), expected)
        assert pol.fc1._frozen is not None
    assert pol.fc1._frozen is None
    with torch.no_grad():
        pol.alpha[0] += (
            1.0  # after release the mix is live again (a uniform shift would not change it)
        )
    assert not torch.allclose(pol.logits(obs), expected)

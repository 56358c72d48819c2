import itertools
import math

import numpy as np
import pytest
import torch
from scipy import stats

from eff_llm._models import tiny_llama
from eff_llm.gain_rl import (
    GainRLCallback,
    GaussianCurriculumSampler,
    GRPOLite,
    UniformSubsetSampler,
    angle_concentration,
    angle_order,
    collect_angle_signal,
    curriculum_trainer,
    greedy_accuracy,
    grpo_train,
)


def _direct(x: torch.Tensor, valid: int, diagonal: int = 1) -> float:
    xb = x[:valid] / x[:valid].norm(dim=1, keepdim=True)
    vals = [float(xb[i] @ xb[j]) for i in range(valid) for j in range(valid) if j <= i + diagonal]
    return sum(vals) / len(vals)


def test_angle_metric_matches_a_direct_computation_on_a_toy_batch():
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2, 4:] = False
    got = angle_concentration(x, mask=mask)
    ref = torch.tensor([_direct(x[b], int(mask[b].sum())) for b in range(4)], dtype=torch.float64)
    assert float((got - ref).abs().max()) <= 1e-6
    single = angle_concentration(x[0], diagonal=0)
    assert single.ndim == 0 and float(single) == pytest.approx(_direct(x[0], 6, 0), abs=1e-6)
    # identical rows: every cosine is 1
    same = torch.ones(5, 3)
    assert float(angle_concentration(same)) == pytest.approx(1.0)


def test_offline_segment_metric_is_the_intended_version():
    x = torch.randn(2, 9, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    sys_seg, q_seg = (0, 4), (4, 8)
    got = angle_concentration(x, segments=(sys_seg, q_seg), inter_weight=8.0)
    for b in range(2):
        xn = x[b] / x[b].norm(dim=1, keepdim=True)
        cm = (xn @ xn.T) * torch.tril(torch.ones(9, 9, dtype=torch.float64), diagonal=1)
        want = cm[4:8, 4:8].mean() + 8 * cm[4:8, 0:4].mean()
        assert float(got[b]) == pytest.approx(float(want), abs=1e-9)
    per_sample = angle_concentration(x, segments=[((0, 4), (4, 8)), (slice(0, 2), slice(2, 9))])
    assert float(per_sample[0]) == pytest.approx(float(got[0]))
    with pytest.raises(ValueError, match=r"question segment .* is empty"):
        angle_concentration(x[0], segments=((0, 4), (6, 6)))
    with pytest.raises(ValueError, match="no valid tokens"):
        angle_concentration(x, mask=torch.zeros(2, 9, dtype=torch.bool))


def test_collect_angle_signal_hooks_the_last_up_proj_input():
    model = tiny_llama(vocab_size=32, hidden_size=16, intermediate_size=32, seed=0).eval()
    ids = torch.randint(0, 32, (5, 7), generator=torch.Generator().manual_seed(2))
    got = collect_angle_signal(model, [ids[:3], {"input_ids": ids[3:]}])
    # reference: the up_proj input is the last layer's post-attention RMSNorm output
    store = {}
    h = model.model.layers[-1].post_attention_layernorm.register_forward_hook(
        lambda _m, _a, out: store.setdefault("x", out)
    )
    with torch.no_grad():
        model(input_ids=ids)
    h.remove()
    ref = torch.tensor([_direct(store["x"][b].double(), 7) for b in range(5)])
    assert float((got.double() - ref).abs().max()) <= 1e-5
    assert torch.equal(angle_order(torch.tensor([0.1, 0.9, 0.5, 0.9])), torch.tensor([1, 3, 2, 0]))
    with pytest.raises(AttributeError, match="out of range"):
        collect_angle_signal(model, [ids], layer=5)
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=32))
    with pytest.raises(AttributeError, match="up_proj"):
        collect_angle_signal(gpt2, [ids])


def test_sampler_histogram_matches_the_gaussian_and_is_seeded():
    n, sigma, mu = 4000, 400.0, 1500.0
    sampler = GaussianCurriculumSampler(torch.arange(n), 200, std=sigma, mu=mu, seed=5)
    draws = [sampler.sample_ranks().numpy() for _ in range(6)]
    assert all(len(set(d)) == 200 for d in draws)  # without replacement
    support = np.arange(n)
    pmf = np.exp(-0.5 * ((support - mu) / sigma) ** 2)
    cdf = np.cumsum(pmf / pmf.sum())
    assert (
        stats.kstest(np.concatenate(draws), lambda r: np.interp(np.floor(r), support, cdf)).pvalue
        > 0.01
    )
    order = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    a = GaussianCurriculumSampler(order, 10, std=5, seed=1)
    b = GaussianCurriculumSampler(order, 10, std=5, seed=1)
    first = list(a)
    assert first == list(b) and list(a) != first  # same seed ⇒ same; next epoch differs
    assert set(first) <= set(order.tolist()) and len(a) == 10
    # μ = 0: the subset is the head of the angle-sorted order
    assert max(order.tolist().index(i) for i in first) < 25
    # each epoch's subset is visited in rank order (the official sampler sorts it)
    for epoch in (list(a), list(a)):
        ranks = [order.tolist().index(i) for i in epoch]
        assert ranks == sorted(ranks) and len(set(ranks)) == 10


def test_toy_sampler_scales_the_official_rank_units_to_the_dataset():
    """σ, n and adj_max are ranks: the toy keeps their GSM8K proportions (1000/7473 N, 500/7473 N,
    adj_max = 2n), so an unscaled σ = 1000 on 512 prompts (a near-uniform draw) is caught."""
    from eff_llm.reproduce import gain_rl as repro
    from eff_llm.reproduce.gain_rl import GainRLReproConfig, gainrl_sampler

    assert (repro._PAPER_N, repro._PAPER_STD, repro._PAPER_STEP) == (7473, 1000.0, 500.0)
    n = 512
    s = gainrl_sampler(torch.arange(n), 128, seed=0)
    assert s.std / n == pytest.approx(1000 / 7473, rel=0.1)
    assert s.step / n == pytest.approx(500 / 7473, rel=0.1)
    assert s.adj_max == pytest.approx(2 * s.step) and s.adj_min == 0.0 and s.mu == 0.0
    assert (s.alpha, s.target_acc) == (2.0, 0.5)
    # raw Δμ < n·(tanh(2·0.5) + tanh(2·1)) < adj_max: the cap never binds, as in the official config
    assert s.delta(1.0, 1.0) < s.adj_max
    cfg = GainRLReproConfig()
    assert cfg.kl_beta == 0.005 and cfg.group_size == 8  # the trl script's β and G
    with pytest.raises(ValueError, match="kl_beta"):
        GainRLReproConfig(kl_beta=-0.1)


def test_update_formula_clipping_and_monotonicity():
    s = GaussianCurriculumSampler(torch.arange(5000), 10, step=500, alpha=2, target_acc=0.5)
    want = 500 * math.tanh(2 * (0.8 - 0.5)) + 500 * math.tanh(2 * 0.4)
    assert s.delta(0.8, 0.4) == pytest.approx(want)
    assert s.update(0.8, 0.4) == pytest.approx(want) and s.mu == pytest.approx(want)
    assert s.delta(0.0, -1.0) == 0.0  # adj_min = 0: μ never goes back
    assert GaussianCurriculumSampler(torch.arange(10), 2, adj_max=3.0).delta(1.0, 1.0) == 3.0
    mus = [s.mu]
    for acc, ang in ((0.0, 0.0), (1.0, 1.0), (0.1, -0.3), (0.6, 0.2)):
        s.update(acc, ang)
        mus.append(s.mu)
    assert all(y >= x for x, y in itertools.pairwise(mus))
    assert s.mu <= 4999
    state = s.state_dict()
    t = GaussianCurriculumSampler(torch.arange(5000), 10)
    t.load_state_dict(state)
    assert t.mu == s.mu and t.epoch == s.epoch


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"std": 0.0}, "std"),
        ({"std": -1.0}, "std"),
        ({"subset_size": 11}, "exceeds the dataset size"),
        ({"adj_min": 5.0, "adj_max": 1.0}, "adj_min"),
        ({"target_acc": 1.5}, "target_acc"),
    ],
)
def test_sampler_bad_inputs(kwargs, match):
    args = {"sorted_indices": torch.arange(10), "subset_size": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        GaussianCurriculumSampler(**args)


def test_replace_allows_large_subsets_and_accuracy_is_checked():
    s = GaussianCurriculumSampler(torch.arange(5), 12, replace=True)
    assert len(list(s)) == 12
    for bad in (1.5, -0.1, 2.0, float("nan")):
        with pytest.raises(ValueError, match="accuracy must lie in"):
            s.update(bad, 0.3)


def test_grpo_advantages_and_loss():
    grpo = GRPOLite(torch.nn.Identity(), group_size=4, clip=0.2)
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    adv = grpo.advantages(r)
    g = r[:4]
    torch.testing.assert_close(adv[:4], (g - g.mean()) / (g.std() + 1e-4))
    assert torch.equal(adv[4:], torch.zeros(4))
    logp = torch.randn(8, 2, generator=torch.Generator().manual_seed(0), requires_grad=True)
    loss = grpo.loss(logp, logp.detach(), adv)
    loss.backward()
    # d loss / d logp_t = −A / (T · N) at ratio 1
    torch.testing.assert_close(logp.grad, -adv[:, None].expand(8, 2) / (2 * 8))
    assert float(logp.grad[4:].abs().max()) == 0.0
    # ratio above 1 + clip with A > 0: clipped, no gradient
    lp = torch.zeros(1, 1, requires_grad=True)
    grpo.loss(lp, torch.full((1, 1), -1.0), torch.ones(1)).backward()
    assert float(lp.grad.abs().max()) == 0.0
    # k3 KL: zero at equal log-probs, positive otherwise
    kl = GRPOLite(torch.nn.Identity(), ref=torch.nn.Identity(), group_size=2, kl_beta=0.5)
    x = torch.zeros(2, 1)
    assert float(kl.loss(x, x, torch.zeros(2), ref_logps=x)) == 0.0
    assert float(kl.loss(x, x, torch.zeros(2), ref_logps=x - 1.0)) > 0
    with pytest.raises(ValueError, match="reference"):
        GRPOLite(torch.nn.Identity(), kl_beta=0.1)
    with pytest.raises(ValueError, match="group_size"):
        GRPOLite(torch.nn.Identity(), group_size=1).advantages(torch.ones(3))


def test_grpo_train_learns_a_rewarded_token_and_is_seeded():
    """Mechanism: reward 1 only for token 3; GRPO raises its greedy accuracy from ~0 to 1."""
    prompts = torch.randint(10, 30, (32, 5), generator=torch.Generator().manual_seed(0))
    answers = torch.full((32,), 3)
    logs = []
    for _ in range(2):
        policy = tiny_llama(vocab_size=32, hidden_size=16, intermediate_size=32, seed=0)
        before = greedy_accuracy(policy, prompts, answers)
        sampler = GaussianCurriculumSampler(torch.arange(32), 16, std=8, step=4, seed=0)
        log = grpo_train(
            policy,
            prompts,
            answers,
            sampler,
            steps=30,
            prompts_per_step=4,
            lr=3e-3,
            eval_every=10,
            seed=1,
        )
        logs.append(log)
    assert before < 0.2 and logs[0].eval_accuracy[-1] == 1.0
    assert logs[0].rollout_accuracy == logs[1].rollout_accuracy
    assert logs[0].mu and all(b >= a for a, b in itertools.pairwise(logs[0].mu))
    uni, twin = UniformSubsetSampler(32, 16, seed=0), UniformSubsetSampler(32, 16, seed=0)
    first = list(uni)
    assert len(set(first)) == 16 and first == list(twin) and list(uni) != first
    with pytest.raises(ValueError, match="exceeds"):
        UniformSubsetSampler(4, 5)


def test_trainer_integration_uses_the_sampler_and_updates_mu(tmp_path):
    from transformers import TrainingArguments

    sampler = GaussianCurriculumSampler(torch.arange(20), 8, std=4, step=2, seed=0)
    trainer_cls = curriculum_trainer()
    model = tiny_llama(vocab_size=32, hidden_size=16, intermediate_size=32, seed=0)
    data = [
        {"input_ids": torch.randint(0, 32, (6,)), "labels": torch.randint(0, 32, (6,))}
        for _ in range(20)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_train_epochs=1,
        report_to=[],
        use_cpu=True,
    )
    trainer = trainer_cls(model=model, args=args, train_dataset=data, curriculum_sampler=sampler)
    assert trainer._get_train_sampler() is sampler

    class State:
        def __init__(self):
            self.log_history = [{"accuracy": 0.7, "angle_concentration": 0.4}, {"loss": 1.0}]

    cb = GainRLCallback(sampler)
    cb.on_epoch_end(args, State(), None)
    assert sampler.mu == pytest.approx(2 * math.tanh(2 * 0.2) + 2 * math.tanh(0.8))


def _drop_timing(arm: dict) -> dict:
    return {k: v for k, v in arm.items() if k != "seconds"}


@pytest.mark.slow
def test_end_to_end_takes_a_custom_ordering():
    from eff_llm.reproduce.gain_rl import GainRLReproConfig, end_to_end, make_task

    cfg = GainRLReproConfig(variants=1, sft_steps=20, steps=10, subset_size=64, eval_every=5)
    n = len(make_task(cfg, 0)["prompts"])
    default = end_to_end(cfg, 0, ("gainrl",))["gainrl"]
    seen = {}

    def reverse_angle(policy, task, signal):  # the anti-curriculum: lowest concentration first
        seen.update(policy=policy, task=task, signal=signal)
        policy.zero_grad()
        return -signal

    rev = end_to_end(cfg, 0, ("gainrl",), ordering=reverse_angle)["gainrl"]
    assert isinstance(seen["policy"], torch.nn.Module) and seen["signal"].shape == (n,)
    assert torch.equal(seen["task"]["prompts"], make_task(cfg, 0)["prompts"])
    assert _drop_timing(rev) != _drop_timing(default)
    # GAIN-RL's own order given explicitly, as a permutation and as scores: the default run
    perm = angle_order(seen["signal"])
    assert _drop_timing(end_to_end(cfg, 0, ("gainrl",), ordering=perm)["gainrl"]) == _drop_timing(
        default
    )
    scores = seen["signal"].numpy()
    assert _drop_timing(end_to_end(cfg, 0, ("gainrl",), ordering=scores)["gainrl"]) == _drop_timing(
        default
    )


def test_resolve_ordering_and_its_errors():
    from eff_llm.reproduce.gain_rl import GainRLReproConfig, end_to_end, resolve_ordering

    assert resolve_ordering([2, 0, 1], 3).tolist() == [2, 0, 1]
    assert resolve_ordering(np.array([2, 0, 1]), 3).tolist() == [2, 0, 1]
    assert resolve_ordering([0.1, 0.9, 0.5, 0.9], 4).tolist() == [1, 3, 2, 0]  # ties by index
    for bad, exc, match in [
        ([0, 1], ValueError, "length 3"),
        ([[0, 1, 2]], ValueError, "1-D"),
        ([0, 0, 1], ValueError, "permutation of range"),
        ([0, 1, 3], ValueError, "permutation of range"),
        ([0.1, float("nan"), 0.2], ValueError, "finite"),
        ([True, False, True], TypeError, "integers .* or floats"),
        ("abc", TypeError, "ordering must be None, a permutation"),
        (3, TypeError, "ordering must be None, a permutation"),
    ]:
        with pytest.raises(exc, match=match):
            resolve_ordering(bad, 3)
    cfg = GainRLReproConfig(variants=1)
    with pytest.raises(ValueError, match="length 256"):  # checked before the warm-up
        end_to_end(cfg, 0, ordering=list(range(10)))
    with pytest.raises(ValueError, match="length 256"):  # a callable's result is checked too
        end_to_end(GainRLReproConfig(variants=1, sft_steps=1), 0, ordering=lambda p, t, s: s[:5])


@pytest.mark.slow
def test_quick_reproduction_claims():
    """Every mechanism check holds; the end-to-end claims are xfail paper claims (claims.md): the
    step ratio is judged in full mode only (neither sampler reaches 80 % in quick mode's 100 steps),
    the accuracy gap at equal steps is run and does not reproduce. The premise diagnostic (angle vs
    per-prompt gain Spearman) is printed."""
    from eff_llm.reproduce.gain_rl import run

    result = run("quick", 0)
    verdicts = {c.text: c.verdict("quick") for c in result.claims}
    assert result.passed and "FAIL" not in verdicts.values(), verdicts
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 9 and all(c.passed for c in checks)
    ratio, gap = (c for c in result.claims if c.kind == "paper")
    assert ratio.headline and ratio.expected == "xfail" and ratio.verdict("quick") == "not judged"
    assert gap.expected == "xfail" and gap.verdict("quick") in ("xfail", "reproduced (unexpected)")
    assert len(result.claims) == 11
    assert any("Spearman" in n for n in result.notes)
    assert len(result.metrics["premise_spearman"]) == 1

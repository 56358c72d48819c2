"""LRQK: ALS prefill, decode update, selection, hit/miss store, exactness, transformers integration."""

import itertools
import math
from dataclasses import replace

import pytest
import torch

from eff_kernels.lrqk import (
    HitMissKVStore,
    LowRankQK,
    LRQKConfig,
    LRQKState,
    als_objective,
    enable_lrqk,
    lrqk_decode_update,
    lrqk_prefill,
    proxy_topk,
    sparse_decode_attention,
)
from eff_kernels.reproduce.lrqk import LRQKReproConfig, make_stream, run, simulate


def small_stream(seed=0, prefill=200, decode=12, heads=2):
    cfg = LRQKReproConfig(heads=heads, prefill=prefill, decode=decode, rank=8, top_k=24, window=4)
    return cfg, *make_stream(cfg, seed)


def test_prefill_als_reaches_the_svd_optimum_and_never_increases_the_objective():
    _, q, k, _ = small_stream(prefill=512, decode=0)  # the spec's ALS check: L = 512, r = 8
    q, k = q.double(), k.double()
    hist = []
    f = lrqk_prefill(
        q, k, 8, iters=6, generator=torch.Generator().manual_seed(0), tol=0.0, history=hist
    )
    assert isinstance(f, LowRankQK) and f.a_k.shape == (2, 512, 8) and f.b_q.shape == (2, 8, 64)
    sv = torch.linalg.svdvals(q @ k.transpose(-1, -2))
    optimum = float((sv[:, 8:] ** 2).sum() / (sv**2).sum())
    objs = [als_objective(q, k, h) for h in hist]
    # mechanism: two ALS iterations land near the truncated SVD (the reproduction's claim asks for
    # 5 %, measured 3.6 % at seed 0 and 6.5 % at seeds 1-2; see the README)
    assert objs[1]["qk_term"] <= 1.10 * optimum
    assert objs[-1]["qk_term"] < objs[0]["qk_term"]
    assert all(b["objective"] <= a["objective"] * (1 + 1e-12) for a, b in itertools.pairwise(objs))
    # the stopping rule: a large tol stops after the first iteration
    hist1 = []
    lrqk_prefill(
        q, k, 8, iters=6, generator=torch.Generator().manual_seed(0), tol=1e9, history=hist1
    )
    assert len(hist1) == 1


@pytest.mark.parametrize("init", ["top", "topcol"])
def test_deterministic_inits_also_converge(init):
    _, q, k, _ = small_stream(prefill=128, decode=0)
    f = lrqk_prefill(q, k, 8, iters=2, init=init)
    assert als_objective(q, k, f)["qk_term"] < 0.2


def test_decode_update_fits_the_new_token_and_reduces_the_b_residual():
    _, q, k, _ = small_stream(prefill=100, decode=1)
    f = lrqk_prefill(q[:, :100], k[:, :100], 8, generator=torch.Generator().manual_seed(0))
    qt, kt = q[:, 100:101], k[:, 100:101]
    idx = torch.arange(90, 100)
    b_q, b_k, q_hat, k_hat = lrqk_decode_update(f, qt, kt, k[:, idx], f.a_k[:, idx])
    assert q_hat.shape == (2, 1, 8) and k_hat.shape == (2, 1, 8)
    before = (q_hat @ f.b_q - qt).norm()
    after = (q_hat @ b_q - qt).norm()
    assert after < before  # exact line search on ‖q̂B_Q − q‖²
    assert (k_hat @ b_k - kt).norm() < (k_hat @ f.b_k - kt).norm()
    # q̂·k̂ᵀ approximates q·kᵀ (the coupling term of the decode objective)
    assert torch.allclose(
        (q_hat @ k_hat.transpose(-1, -2)).squeeze(), (qt @ kt.transpose(-1, -2)).squeeze(), rtol=0.3
    )


def test_proxy_topk_ignores_the_window():
    a_k = torch.zeros(1, 10, 2)
    a_k[0, :, 0] = torch.arange(10.0)
    q_hat = torch.tensor([[[1.0, 0.0]]])
    assert proxy_topk(q_hat, a_k, 3, exclude_last=4).tolist() == [[3, 4, 5]]
    assert proxy_topk(q_hat, a_k, 20, exclude_last=4).tolist() == [[0, 1, 2, 3, 4, 5]]
    with pytest.raises(ValueError, match="k must be"):
        proxy_topk(q_hat, a_k, 0)


def test_hit_miss_store_moves_only_missing_rows():
    store = HitMissKVStore(1, 4, capacity=3)
    k = torch.arange(40.0).reshape(1, 10, 4)
    store.append(k, -k)
    ks, vs, moved = store.fetch([torch.tensor([1, 2, 3])])
    assert (
        moved == 3 and torch.equal(ks[0], k[0, [1, 2, 3]]) and torch.equal(vs[0], -k[0, [1, 2, 3]])
    )
    ks, _, moved = store.fetch([torch.tensor([3, 7, 2])])
    assert moved == 1 and torch.equal(ks[0], k[0, [3, 7, 2]])  # only token 7 was copied
    assert store.resident(0) == {2, 3, 7}
    _, _, moved = store.fetch([torch.tensor([2, 3, 7])])
    assert moved == 0 and store.transferred == 4 and store.hit_rate == pytest.approx(1 - 4 / 9)
    with pytest.raises(ValueError, match="capacity"):
        store.fetch([torch.arange(4)])
    with pytest.raises(ValueError, match="indices must lie"):
        store.fetch([torch.tensor([10])])


def test_state_invariant_slots_equal_proxy_topk_and_transfers_equal_new_minus_old():
    _, q, k, v = small_stream(seed=1)
    lcfg = LRQKConfig(rank=8, top_k=24, window=4, pin_memory=False)
    st = LRQKState(lcfg, 2, 2, 64, collect_until=0)
    st.prefill(q[None, :, :200], k[None, :, :200], v[None, :, :200])
    old = [set(st.selected[h].tolist()) for h in range(2)]
    for t in range(200, 212):
        _, info = st.decode(q[None, :, t : t + 1], k[None, :, t : t + 1], v[None, :, t : t + 1])
        expect = proxy_topk(info["q_hat"], st.a_k, 24, exclude_last=4)
        new = [set(expect[h].tolist()) for h in range(2)]
        for h in range(2):
            assert st.store.resident(h) == new[h]
            assert st.resident_indices(h) == new[h] | set(range(t + 1 - 4, t + 1))
        assert info["transferred"] == sum(len(new[h] - old[h]) for h in range(2))
        old = new
    assert st.a_k.shape == (2, 212, 8)  # one row of A_K per decoded token


def test_output_is_exact_when_top_k_covers_every_token():
    _, q, k, v = small_stream(seed=2)
    st = LRQKState(
        LRQKConfig(rank=8, top_k=212, window=4, pin_memory=False), 2, 2, 64, collect_until=0
    )
    st.prefill(q[None, :, :200], k[None, :, :200], v[None, :, :200])
    for t in range(200, 212):
        out, _ = st.decode(q[None, :, t : t + 1], k[None, :, t : t + 1], v[None, :, t : t + 1])
        p = torch.softmax((k[:, : t + 1] @ q[:, t].unsqueeze(-1)).squeeze(-1) / 8.0, dim=-1)
        full = torch.stack([p[h] @ v[h, : t + 1] for h in range(2)])
        assert (out[0, :, 0] - full).abs().max() <= 1e-5


def test_gqa_state_keeps_the_union_per_kv_head():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 60, 32, generator=g)
    k, v = torch.randn(1, 2, 60, 32, generator=g), torch.randn(1, 2, 60, 32, generator=g)
    st = LRQKState(
        LRQKConfig(rank=4, top_k=8, window=2, pin_memory=False), 4, 2, 32, collect_until=0
    )
    st.prefill(q[:, :, :50], k[:, :, :50], v[:, :, :50])
    for t in range(50, 60):
        out, _ = st.decode(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1])
        for h in range(4):
            idx = torch.tensor(sorted(st.resident_indices(h)))
            s = k[0, h // 2, idx] @ q[0, h, t] / math.sqrt(32)
            exact = torch.softmax(s, -1) @ v[0, h // 2, idx]
            assert torch.allclose(out[0, h, 0], exact, atol=1e-5)
        for j in range(2):  # capacity is group·k: rows no query head wants stay cached until reused
            union = set(st.selected[2 * j].tolist()) | set(st.selected[2 * j + 1].tolist())
            assert union <= st.store.resident(j) and len(st.store.resident(j)) <= 2 * 8


SELECTION = ("recall", "mass", "relerr")
METHODS = ("lrqk", "oracle", "pca_k", "rand_proj", "window")


def test_batched_state_gives_each_sequence_what_it_gets_alone():
    # reference: every sequence of a batch decoded alone (same seeded ALS start, own stopping rule)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 4, 70, 32, generator=g)
    k, v = torch.randn(3, 2, 70, 32, generator=g), torch.randn(3, 2, 70, 32, generator=g)
    lcfg = LRQKConfig(rank=4, top_k=8, window=2, pin_memory=False, seed=5)
    batched = LRQKState(lcfg, 4, 2, 32, batch=3, collect_until=0)
    alone = [LRQKState(lcfg, 4, 2, 32, collect_until=0) for _ in range(3)]
    batched.prefill(q[:, :, :60], k[:, :, :60], v[:, :, :60])
    for b, st in enumerate(alone):
        st.prefill(q[b : b + 1, :, :60], k[b : b + 1, :, :60], v[b : b + 1, :, :60])
    for t in range(60, 70):
        step = (x[:, :, t : t + 1] for x in (q, k, v))
        out, info = batched.decode(*step)
        moved = 0
        for b, st in enumerate(alone):
            o, i = st.decode(*(x[b : b + 1, :, t : t + 1] for x in (q, k, v)))
            assert torch.equal(info["selected"][4 * b : 4 * b + 4], i["selected"])
            assert torch.allclose(out[b : b + 1], o, atol=1e-6)
            moved += i["transferred"]
        assert info["transferred"] == moved


def test_simulate_batch_equals_each_sequence_simulated_alone():
    cfg = LRQKReproConfig(prefill=160, decode=6, rank=8, top_k=16, window=4, batch=2)
    q, k, v = make_stream(cfg, 1)
    assert q.shape == (2, 2, 166, 64) and k.shape == (2, 2, 166, 64)
    one = replace(cfg, batch=1)
    # the first sequence is the batch-1 stream of the same seed (defaults unchanged)
    assert all(torch.equal(a[0], b) for a, b in zip((q, k, v), make_stream(one, 1), strict=True))
    res = simulate(cfg, 1)
    per = [simulate(one, 1, stream=(q[b], k[b], v[b])) for b in range(2)]
    for m in METHODS:
        for key in SELECTION:
            ref = (per[0][m][key] + per[1][m][key]) / 2
            assert res[m][key] == pytest.approx(ref, rel=1e-5, abs=1e-7), (m, key)
    assert res["transferred_per_k"] == pytest.approx(
        (per[0]["transferred_per_k"] + per[1]["transferred_per_k"]) / 2, rel=1e-9
    )
    assert res["max_abs_diff_full"] == pytest.approx(
        max(p["max_abs_diff_full"] for p in per), rel=1e-4, abs=1e-7
    )
    assert per[0]["lrqk"]["recall"] != per[1]["lrqk"]["recall"]  # two different sequences


def test_simulate_gqa_equals_the_repeated_kv_computation_and_shares_transfers():
    cfg = LRQKReproConfig(heads=4, kv_heads=2, prefill=160, decode=6, rank=8, top_k=16, window=4)
    q, k, v = make_stream(cfg, 0)
    assert q.shape == (4, 166, 64) and k.shape == v.shape == (2, 166, 64)
    gqa = simulate(cfg, 0)
    mha = simulate(
        replace(cfg, kv_heads=None),
        0,
        stream=(q, k.repeat_interleave(2, 0), v.repeat_interleave(2, 0)),
    )
    for m in METHODS:
        for key in SELECTION:
            assert gqa[m][key] == pytest.approx(mha[m][key], rel=1e-6, abs=1e-8), (m, key)
    assert gqa["max_abs_diff_full"] == pytest.approx(mha["max_abs_diff_full"], abs=1e-6)
    # a K/V head fetches the union of its query heads' selections once
    assert gqa["transferred_per_k"] < mha["transferred_per_k"]
    assert gqa["lrqk"]["recall"] > 2 * gqa["window"]["recall"]  # the GQA stream has signal
    # batch and GQA together: exact over the full context when top-k covers it
    both = replace(cfg, batch=2, decode=3)
    assert simulate(both, 0, exact_check=True)["max_abs_diff_full"] <= 1e-5


def test_repro_config_and_stream_bad_inputs_raise():
    with pytest.raises(ValueError, match=r"kv_heads must divide heads=4, got 3"):
        LRQKReproConfig(heads=4, kv_heads=3)
    with pytest.raises(ValueError, match=r"batch must be an integer in \[1, inf\], got 0"):
        LRQKReproConfig(batch=0)
    cfg = LRQKReproConfig(prefill=40, decode=2, rank=4, top_k=8, window=2, batch=2)
    q, k, v = make_stream(cfg, 0)
    with pytest.raises(ValueError, match=r"stream q must have shape \(2, 2, 42, 64\)"):
        simulate(cfg, 0, stream=(q[0], k, v))


@pytest.mark.parametrize("n", [5, 70, 130])
def test_sparse_decode_attention_triton_matches_reference(n):
    g = torch.Generator().manual_seed(n)
    q = torch.randn(4, 64, generator=g)
    ks, vs = torch.randn(2, 150, 64, generator=g), torch.randn(2, 150, 64, generator=g)
    idx = torch.randint(0, 150, (4, n), generator=g)
    idx[1, -3:] = -1  # padding
    ref = sparse_decode_attention(q, ks, vs, idx, backend="reference")
    tri = sparse_decode_attention(q, ks, vs, idx, backend="triton")
    assert torch.allclose(tri, ref, atol=1e-5)
    # the reference is exact softmax attention over the selected rows
    sel = idx[0]
    manual = torch.softmax(ks[0, sel] @ q[0] / 8.0, -1) @ vs[0, sel]
    assert torch.allclose(ref[0], manual, atol=1e-5)


def test_singular_systems_do_not_produce_nan():
    q = torch.randn(1, 40, 16)
    k = torch.zeros(1, 40, 16)  # rank 0 keys make A_KᵀA_K singular after one update
    f = lrqk_prefill(q, k, 4, iters=3, tol=0.0)
    assert all(torch.isfinite(t).all() for t in f)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="rank"):
        LRQKConfig(rank=0)
    with pytest.raises(ValueError, match="top_k"):
        LRQKConfig(top_k=0)
    with pytest.raises(ValueError, match="window"):
        LRQKConfig(window=-1)
    with pytest.raises(ValueError, match="init"):
        LRQKConfig(init="svd")
    q = torch.randn(1, 20, 16)
    with pytest.raises(ValueError, match="rank must be an integer in"):
        lrqk_prefill(q, q, 17)
    with pytest.raises(ValueError, match="same shape"):
        lrqk_prefill(q, q[..., :8], 4)
    with pytest.raises(ValueError, match="rank must be an integer in"):
        LRQKState(LRQKConfig(rank=20), 2, 2, 16)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        LRQKState(LRQKConfig(rank=4), 3, 2, 16)
    with pytest.raises(ValueError, match="multiple of kv heads"):
        sparse_decode_attention(
            torch.randn(3, 16),
            torch.randn(2, 5, 16),
            torch.randn(2, 5, 16),
            torch.zeros(3, 2, dtype=torch.long),
        )
    st = LRQKState(LRQKConfig(rank=4, top_k=4, window=2, pin_memory=False), 2, 2, 16)
    st.prefill(torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16))
    with pytest.raises(NotImplementedError, match="one token per step"):
        st.decode(torch.randn(1, 2, 2, 16), torch.randn(1, 2, 2, 16), torch.randn(1, 2, 2, 16))


@pytest.mark.slow  # importing transformers alone takes ~10 s on a loaded machine
def test_transformers_integration_exact_when_k_covers_the_context_and_runs_sparse(tiny_llama):
    model = tiny_llama.eval()
    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    ref = model.generate(ids, max_new_tokens=6, do_sample=False)
    cache = enable_lrqk(model, LRQKConfig(rank=8, top_k=64, window=4, pin_memory=False))
    assert torch.equal(model.generate(ids, max_new_tokens=6, do_sample=False, cache=cache), ref)
    cache = enable_lrqk(model, LRQKConfig(rank=8, top_k=12, window=4, pin_memory=False))
    out = model.generate(ids, max_new_tokens=6, do_sample=False, cache=cache)
    assert out.shape == ref.shape and torch.equal(
        out[:, :41], ref[:, :41]
    )  # prefill is full attention
    states = [layer.state for layer in cache.layers]
    assert all(s.active and s.steps == 5 for s in states)
    assert (
        0 < states[0].store.transferred <= 5 * 2 * 2 * 12
    )  # rows, bounded by steps·kv-heads·group·k
    with pytest.raises(NotImplementedError, match="beam search"):
        cache.layers[0].reorder_cache(torch.tensor([0]))


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    result = run("quick", seed=0)
    assert result.passed and len(result.claims) == 9
    # every check passes, every paper claim gets its expected verdict
    for c in result.claims:
        ok = (
            ("pass",)
            if c.kind == "check" or c.expected == "reproduces"
            else ("xfail", "reproduced (unexpected)")
        )
        assert c.verdict(result.mode) in ok, c
    checks = [c for c in result.claims if c.kind == "check"]
    assert len(checks) == 3
    als = next(c for c in checks if c.text.startswith("ALS after 3 iterations"))
    assert als.seeds == (0, 1, 2) and len(als.values) == 3  # specs/claims.md: seeds 0-2 each
    papers = [c for c in result.claims if c.kind == "paper"]
    assert all(c.seeds == (0, 1) and c.paper for c in papers)
    assert any(c.headline for c in papers) and result.paper_title and result.headline
    assert any("after 2 iterations" in n for n in result.notes)
    assert [r["method"] for r in result.table] == ["lrqk", "oracle", "pca_k", "rand_proj", "window"]

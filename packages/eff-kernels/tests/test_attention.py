"""SageAttention2/3 and SageBwd: references vs float64, Triton (interpreted) vs references, API."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import eff_kernels.attention as A
from eff_kernels.attention import (
    FP4EmulationWarning,
    attention_error,
    attention_fp64,
    kv_bytes_per_token,
    p_quant_attention,
    patch_sdpa,
    sage_attention,
    sage_attention3,
)

pytestmark = pytest.mark.filterwarnings("ignore::eff_kernels.attention.FP4EmulationWarning")

FORMATS = {
    "int8-fp16": {"pv_dtype": "fp16"},
    "int8-fp8": {"pv_dtype": "fp8"},
    "int8-int8": {"pv_dtype": "int8"},
    "nvfp4": {"pv_dtype": "fp4"},
    "mxfp4": {"pv_dtype": "fp4", "fp4_format": "mxfp4"},
}


def qkv(b=1, hq=2, hkv=None, n=96, m=None, d=64, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    hkv = hkv or hq
    m = m or n
    q = torch.randn(b, hq, n, d, generator=g)
    k = torch.randn(b, hkv, m, d, generator=g)
    v = torch.randn(b, hkv, m, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ----------------------------------------------------------------------------------------------
# numerics of the references


@pytest.mark.parametrize(
    ("fmt", "cos_min", "l1_max"),
    [
        ("int8-fp16", 0.999, 0.04),
        ("int8-fp8", 0.998, 0.06),
        ("int8-int8", 0.999, 0.04),
        ("nvfp4", 0.97, 0.25),
    ],
)
def test_reference_schemes_are_close_to_float64(fmt, cos_min, l1_max):
    q, k, v = qkv(hq=2, n=256)
    e = attention_error(sage_attention(q, k, v, **FORMATS[fmt]), attention_fp64(q, k, v))
    assert e["cos"] >= cos_min and e["rel_l1"] <= l1_max, e


def test_k_smoothing_removes_a_shared_key_bias():
    q, k, v = qkv(hq=2, n=256, seed=3)
    bias = torch.zeros(64)
    bias[:4] = 40.0
    k = (k.float() + bias).half()
    ref = attention_fp64(q, k, v)
    smooth = attention_error(sage_attention(q, k, v), ref)["rel_l1"]
    raw = attention_error(sage_attention(q, k, v, smooth_k=False), ref)["rel_l1"]
    assert raw > 2 * smooth


def test_two_level_p_beats_one_level_when_scores_are_peaky():
    g = torch.Generator().manual_seed(0)
    c = math.sqrt(5.0)
    q, k = (torch.randn(1, 1, 512, 64, generator=g) * c for _ in range(2))
    v = torch.randn(1, 1, 512, 64, generator=g)
    ref = attention_fp64(q, k, v)
    two = attention_error(p_quant_attention(q, k, v, two_level=True), ref)["rel_l1"]
    one = attention_error(p_quant_attention(q, k, v, two_level=False), ref)["rel_l1"]
    assert one > 1.5 * two


def test_return_lse_is_the_logsumexp_of_the_unsmoothed_scores():
    q, k, v = qkv(hq=2, n=64, m=80)
    k = k + 3.0  # a shared bias that K smoothing removes and the LSE must add back
    for pv in ("fp16", "fp8", "fp4"):
        _, lse = sage_attention(q, k, v, pv_dtype=pv, return_lse=True)
        exact = torch.logsumexp(q.double() @ k.double().transpose(-1, -2) / 8.0, dim=-1)
        err = (lse - exact).abs()
        assert lse.shape == (1, 2, 64), pv
        if pv == "fp4":  # FP4 Q·Kᵀ moves single scores by ~0.1; the K-mean correction is ~1
            assert err.mean() < 0.03 and err.max() < 0.3, pv
        else:
            assert err.max() < 0.01, pv


# ----------------------------------------------------------------------------------------------
# Triton kernels (interpreted) vs the references


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(
    ("causal", "hq", "hkv", "n", "m"),
    [(False, 2, 2, 80, 70), (True, 4, 1, 90, 90), (True, 2, 2, 70, 100)],
    ids=["ragged", "causal-gqa", "causal-ragged"],
)
def test_triton_matches_reference(fmt, causal, hq, hkv, n, m):
    q, k, v = qkv(hq=hq, hkv=hkv, n=n, m=m, seed=1)
    kw = dict(is_causal=causal, enable_gqa=hq != hkv, **FORMATS[fmt])
    tri = sage_attention(q, k, v, backend="triton", **kw)
    ref = sage_attention(q, k, v, backend="reference", **kw)
    e = attention_error(tri, ref)
    assert e["cos"] >= 0.9999 and e["rel_l1"] <= 0.01, e
    if fmt == "int8-fp16":
        assert (
            attention_error(tri, attention_fp64(q, k, v, is_causal=causal, enable_gqa=hq != hkv))[
                "cos"
            ]
            >= 0.999
        )


@pytest.mark.parametrize("granularity", ["per_warp", "per_thread"])
def test_other_granularities_run_in_triton_and_match(granularity):
    q, k, v = qkv(n=100, seed=2)
    tri = sage_attention(q, k, v, qk_granularity=granularity, backend="triton")
    ref = sage_attention(q, k, v, qk_granularity=granularity, backend="reference")
    assert attention_error(tri, ref)["cos"] >= 0.9999
    assert attention_error(ref, attention_fp64(q, k, v))["cos"] >= 0.999


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_masks_match_sdpa(kind):
    q, k, v = qkv(hq=2, n=40, m=50, seed=4)
    g = torch.Generator().manual_seed(0)
    keep = torch.rand(1, 1, 40, 50, generator=g) > 0.3
    keep[..., 0] = True
    mask = keep if kind == "bool" else torch.where(keep, 0.0, -1e4).half()
    ref = attention_fp64(q, k, v, attn_mask=mask)
    for backend in ("reference", "triton"):
        out = sage_attention(q, k, v, attn_mask=mask, backend=backend)
        assert attention_error(out, ref)["cos"] >= 0.999, backend


def test_layout_dtype_and_head_dim_padding():
    q, k, v = qkv(hq=2, n=48, d=72, dtype=torch.bfloat16)
    ref = attention_fp64(q, k, v)
    out = sage_attention(q, k, v)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    assert attention_error(out, ref)["cos"] >= 0.999
    nhd = sage_attention(*(t.transpose(1, 2) for t in (q, k, v)), layout="NHD", backend="triton")
    assert attention_error(nhd.transpose(1, 2), ref)["cos"] >= 0.999


def test_empty_sequences_return_empty_or_zero_output():
    q, k, v = qkv(n=4)
    assert sage_attention(q[:, :, :0], k, v).shape == (1, 2, 0, 64)
    out = sage_attention(q, k[:, :, :0], v[:, :, :0])
    assert out.shape == q.shape and bool((out == 0).all())


def test_kv_bytes_per_token():
    assert kv_bytes_per_token("nvfp4")["ratio_to_fp16"] == pytest.approx(0.28125)
    assert kv_bytes_per_token("int8-fp8")["ratio_to_fp16"] == pytest.approx(0.5, abs=0.005)
    assert kv_bytes_per_token("fp16")["bytes_per_token"] == 256


# ----------------------------------------------------------------------------------------------
# autograd: never a silently cut gradient, SageBwd, exact backward


def grads(fn, q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v)
    out.backward(do)
    return out.detach(), q.grad, k.grad, v.grad


def test_inputs_requiring_grad_without_backward_raise():
    q, k, v = qkv(n=16)
    q.requires_grad_()
    with pytest.raises(RuntimeError, match="silently cut the gradient"):
        sage_attention(q, k, v)
    with torch.no_grad():
        sage_attention(q, k, v)  # inference under no_grad is fine


def test_sagebwd_gradients_are_close_to_float64_and_dk_sums_to_zero():
    q, k, v = qkv(hq=2, n=192, seed=5)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(1)).half()
    ref = grads(attention_fp64, q.double(), k.double(), v.double(), do.double())
    out = grads(lambda a, b, c: sage_attention(a, b, c, backward="sagebwd"), q, k, v, do)
    for name, o, r in zip(("O", "dQ", "dK", "dV"), out, ref, strict=True):
        e = attention_error(o, r)
        assert e["cos"] >= (0.99 if name == "dK" else 0.999) and e["rel_l1"] <= 0.1, (name, e)
    assert out[2].float().sum(dim=-2).abs().max() < 1e-2  # K smoothing: Σ_j dK_j = 0


@pytest.mark.parametrize(
    ("causal", "hq", "hkv", "n", "m"), [(False, 2, 1, 70, 90), (True, 2, 2, 100, 100)]
)
def test_sagebwd_triton_matches_reference(causal, hq, hkv, n, m):
    q, k, v = qkv(hq=hq, hkv=hkv, n=n, m=m, seed=6)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(2)).half()
    kw = dict(backward="sagebwd", is_causal=causal, enable_gqa=hq != hkv)
    tri = grads(lambda a, b, c: sage_attention(a, b, c, backend="triton", **kw), q, k, v, do)
    ref = grads(lambda a, b, c: sage_attention(a, b, c, backend="reference", **kw), q, k, v, do)
    for t, r in zip(tri, ref, strict=True):
        e = attention_error(t, r)
        assert e["cos"] >= 0.9999 and e["rel_l1"] <= 0.01, e


def test_sagebwd_with_a_bool_mask_in_triton():
    q, k, v = qkv(hq=2, n=64, m=64, seed=7)
    mask = torch.ones(64, 64, dtype=torch.bool).tril()
    do = torch.randn(q.shape).half()
    tri = grads(
        lambda a, b, c: sage_attention(
            a, b, c, attn_mask=mask, backward="sagebwd", backend="triton"
        ),
        q,
        k,
        v,
        do,
    )
    ref = grads(
        lambda a, b, c: attention_fp64(a, b, c, attn_mask=mask),
        q.double(),
        k.double(),
        v.double(),
        do.double(),
    )
    for t, r in zip(tri, ref, strict=True):
        assert attention_error(t, r)["cos"] >= 0.99


def test_exact_backward_matches_float64_gradients():
    q, k, v = qkv(hq=2, hkv=1, n=48, seed=8)
    do = torch.randn(q.shape).half()
    out = grads(
        lambda a, b, c: sage_attention(a, b, c, backward="exact", pv_dtype="fp8", enable_gqa=True),
        q,
        k,
        v,
        do,
    )
    ref = grads(
        lambda a, b, c: attention_fp64(a, b, c, enable_gqa=True),
        q.double(),
        k.double(),
        v.double(),
        do.double(),
    )
    for o, r in zip(out[1:], ref[1:], strict=True):
        assert attention_error(o, r)["cos"] >= 0.9999


# ----------------------------------------------------------------------------------------------
# integration: SDPA patch, transformers


def test_patch_sdpa_replaces_and_restores():
    original = F.scaled_dot_product_attention
    q, k, v = qkv(n=32)
    with patch_sdpa(pv_dtype="fp8"):
        assert F.scaled_dot_product_attention is not original
        out = F.scaled_dot_product_attention(q, k, v, None, 0.0, True)  # positional, as SDPA
    assert F.scaled_dot_product_attention is original
    assert torch.allclose(out, sage_attention(q, k, v, is_causal=True, pv_dtype="fp8"))
    with pytest.raises(KeyError), patch_sdpa():
        raise KeyError("boom")
    assert F.scaled_dot_product_attention is original


@pytest.mark.slow  # importing transformers alone takes ~10 s on a loaded machine
def test_transformers_sage_generates_the_sdpa_greedy_tokens_and_trains_with_sagebwd(tiny_llama):
    model = tiny_llama.eval()
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(0))
    ref = model.generate(ids, max_new_tokens=10, do_sample=False)
    A.register_transformers("sage")
    model.set_attn_implementation("sage")
    assert torch.equal(model.generate(ids, max_new_tokens=10, do_sample=False), ref)
    with pytest.raises(RuntimeError, match="silently cut"):
        model(ids, labels=ids)  # grads needed but backward=None
    A.register_transformers("sage_train", backward="sagebwd")
    model.set_attn_implementation("sage_train")
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss0 = model(ids, labels=ids).loss
    loss0.backward()
    g = model.model.layers[0].self_attn.q_proj.weight.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
    opt.step()
    with torch.no_grad():
        assert model(ids, labels=ids).loss < loss0


# ----------------------------------------------------------------------------------------------
# SageAttention3 API and bad inputs


def test_sage_attention3_warns_once_and_matches_the_fp4_path():
    A.common._WARNED_FP4 = False  # the once-per-process flag, where warn_fp4_emulation keeps it
    q, k, v = qkv(n=64)
    with pytest.warns(FP4EmulationWarning, match="no speedup"):
        out = sage_attention3(q, k, v)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = sage_attention3(q, k, v)
    assert torch.equal(out, again)
    assert attention_error(out, attention_fp64(q, k, v))["cos"] >= 0.97
    one_mean = sage_attention3(q, k, v, per_block_mean=False)
    assert attention_error(one_mean, attention_fp64(q, k, v))["cos"] >= 0.97
    with pytest.raises(RuntimeError, match="emulate=False"):
        sage_attention3(q, k, v, emulate=False)


def test_bad_inputs_raise_the_documented_errors():
    q, k, v = qkv(n=8)
    with pytest.raises(TypeError, match="floating"):
        sage_attention(q.int(), k, v)
    with pytest.raises(TypeError, match="one dtype"):
        sage_attention(q.float(), k, v)
    with pytest.raises(ValueError, match="rank 4"):
        sage_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        sage_attention(q.repeat(1, 3, 1, 1)[:, :3], k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        sage_attention(q.repeat(1, 2, 1, 1), k, v)
    with pytest.raises(ValueError, match="same head dim"):
        sage_attention(q, k, v[..., :32])
    with pytest.raises(ValueError, match="layout"):
        sage_attention(q, k, v, layout="BHND")
    with pytest.raises(ValueError, match="pv_dtype"):
        sage_attention(q, k, v, pv_dtype="fp6")
    with pytest.raises(ValueError, match="backend"):
        sage_attention(q, k, v, backend="tpu")
    with pytest.raises(ValueError, match="is_causal"):
        sage_attention(q, k, v, attn_mask=torch.ones(8, 8, dtype=torch.bool), is_causal=True)
    with pytest.raises(ValueError, match="<= 256"):
        big = torch.zeros(1, 1, 4, 264, dtype=torch.float16)
        sage_attention(big, big, big)
    with pytest.raises(NotImplementedError, match="dropout"):
        sage_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(RuntimeError, match="backend='cuda'"):
        sage_attention(q, k, v, backend="cuda")
    if torch.cuda.is_available():  # pragma: no cover - CPU CI
        with pytest.raises(ValueError, match="one device"):
            sage_attention(q, k.cuda(), v)
    else:
        with pytest.raises(ValueError, match="one device"):
            sage_attention(q, k.to("meta"), v)
    with pytest.raises(ValueError, match="not a SageAttention scheme"):
        sage_attention(q, k, v, qk_dtype="fp4", pv_dtype="fp16")
    with pytest.raises(ValueError, match="smooth_q"):
        sage_attention(q, k, v, smooth_q=True)
    with pytest.raises(ValueError, match="backward"):
        sage_attention(q, k, v, backward="int4")


def test_triton_on_cpu_works_after_triton_was_imported_in_compiled_mode():
    """A process that imported triton without TRITON_INTERPRET (transformers, inductor or the user
    did) must still run our kernels interpreted on CPU: triton's ``@jit`` library functions
    (``tl.zeros``, ``tl.max``) are JITFunctions then, which an interpreted kernel cannot call
    unless the loader swaps in interpreted twins for the launch."""
    import os
    import subprocess
    import sys

    code = (
        "import triton.language as tl, torch\n"
        "from triton.runtime.jit import JITFunction\n"
        "assert isinstance(tl.zeros, JITFunction)\n"
        "from eff_kernels.attention import sage_attention\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q, k, v = (torch.randn(1, 2, 40, 64, generator=g).half() for _ in range(3))\n"
        "tri = sage_attention(q, k, v, backend='triton').float()\n"
        "ref = sage_attention(q, k, v, backend='reference').float()\n"
        "cos = torch.nn.functional.cosine_similarity(tri.flatten(), ref.flatten(), dim=0)\n"
        "assert cos >= 0.9999, float(cos)\n"
        "assert isinstance(tl.zeros, JITFunction)  # restored after the launch\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]

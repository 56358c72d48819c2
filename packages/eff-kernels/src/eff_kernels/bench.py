"""The GPU benchmark of eff-kernels: one run gives every number of the spec's GPU plan.

1. **attention** — the Triton kernels compiled for CUDA vs the PyTorch reference on the same device
   (cos, rel-L1; a 1k slice also vs float64), then CUDA-event timing (10 warm-up, 50 iterations;
   fewer at 16k/32k) of torch SDPA (flash backend), our INT8+FP16 and INT8+FP8 kernels (kernel alone
   and with the quantization pre-pass), and ``sageattention.sageattn`` / ``flash_attn`` when
   installed, for B = 4, H = 32, D ∈ {64, 128}, N ∈ {1k, 4k, 16k, 32k}, causal ∈ {0, 1}, bf16.
   TOPS = 4·N²·D·B·H (half when causal) / time. NVFP4 is timed at N ≤ 4k only (emulated on Hopper).
2. **lrqk** — a random-init Llama (8 layers, hidden 1024, 16 heads, d = 64, 4 KV heads) at a 32K
   context: decode tokens/s and peak memory with ``DynamicCache``, transformers' offloaded cache and
   LRQK (r = 32, k = 2048, w = 64); K/V rows and bytes transferred per step.
3. **paretoq** — the packed low-bit GEMM vs ``torch.mm`` in bf16 at M ∈ {1, 16, 128}, N = K = 4096,
   in GB/s (vs the H200 HBM bound of 4.8 TB/s) and TFLOPS; correctness vs the reference.

``dry_run=True`` uses tiny shapes and runs on CPU (Triton interpreted), so CI checks the script end
to end. Every correctness check is reported; the result's ``ok`` is False (and the scripts exit
with status 1) when a section raised or a kernel did not match its reference.
"""

from __future__ import annotations

import importlib
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from eff_shared.torch import threads

__all__ = ["SECTIONS", "run_bench"]

SECTIONS = ("attention", "lrqk", "paretoq")
H200 = {"bf16_tflops": 989.0, "int8_fp8_tops": 1979.0, "hbm_tb_s": 4.8, "pcie_gb_s": 64.0}
TIME_BUDGET_S = 200.0


def _timer(fn: Callable[[], Any], warmup: int, iters: int, cuda: bool) -> float:
    """Seconds per call (CUDA events on GPU, perf_counter on CPU)."""
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000.0 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def _optional(name: str) -> Any:
    """An optional peer package (sageattention, flash_attn), or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _iters(n: int, dry: bool) -> tuple[int, int]:
    if dry:
        return 1, 2
    if n <= 4096:
        return 10, 50
    return (3, 10) if n <= 16384 else (2, 5)


def _attention(
    dry: bool, device: torch.device, echo: Callable[[str], None], t_start: float
) -> dict[str, Any]:
    from eff_kernels.attention import (
        FP4EmulationWarning,
        attention_error,
        attention_fp64,
        sage_attention,
    )
    from eff_kernels.attention.common import prepare
    from eff_kernels.attention.forward import triton_forward

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float16
    out: dict[str, Any] = {"accuracy": [], "timing": []}
    # 1. correctness: kernels vs the reference on the same device, and vs float64
    b, h, n = (1, 2, 160) if dry else (1, 8, 1024)
    dims = (64,) if dry else (64, 128)
    g = torch.Generator(device="cpu").manual_seed(0)
    for d in dims:
        q, k, v = (torch.randn(b, h, n, d, generator=g).to(device, dtype) for _ in range(3))
        for causal in (False, True):
            ref64 = attention_fp64(q, k, v, is_causal=causal)
            for fmt, kw in (
                ("int8-fp16", {"pv_dtype": "fp16"}),
                ("int8-fp8", {"pv_dtype": "fp8"}),
                ("int8-int8", {"pv_dtype": "int8"}),
                ("nvfp4", {"pv_dtype": "fp4"}),
            ):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FP4EmulationWarning)
                    tri = sage_attention(q, k, v, is_causal=causal, backend="triton", **kw)
                    ref = sage_attention(q, k, v, is_causal=causal, backend="reference", **kw)
                e = attention_error(tri, ref)
                row = {
                    "format": fmt,
                    "head_dim": d,
                    "causal": causal,
                    "cos_vs_ref": e["cos"],
                    "rel_l1_vs_ref": e["rel_l1"],
                    "cos_vs_fp64": attention_error(tri, ref64)["cos"],
                }
                row["ok"] = row["cos_vs_ref"] >= 0.9999 and row["rel_l1_vs_ref"] <= 0.01
                out["accuracy"].append(row)
            # SageBwd gradients: Triton vs reference
            do = torch.randn(q.shape, generator=g).to(device, dtype)
            grads = {}
            for be in ("triton", "reference"):
                qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
                sage_attention(
                    qq, kk, vv, is_causal=causal, backward="sagebwd", backend=be
                ).backward(do)
                grads[be] = (qq.grad, kk.grad, vv.grad)
            cs = [
                attention_error(a, r)["cos"]
                for a, r in zip(grads["triton"], grads["reference"], strict=True)
            ]
            out["accuracy"].append(
                {
                    "format": "sagebwd dQ/dK/dV",
                    "head_dim": d,
                    "causal": causal,
                    "cos_vs_ref": min(cs),
                    "rel_l1_vs_ref": float("nan"),
                    "cos_vs_fp64": float("nan"),
                    "ok": min(cs) >= 0.9999,
                }
            )
    bad = [r for r in out["accuracy"] if not r["ok"]]
    echo(
        f"attention correctness: {len(out['accuracy']) - len(bad)}/{len(out['accuracy'])} kernel checks match the reference"
    )
    # 2. timing
    bb, hh = (1, 2) if dry else (4, 32)
    seqs = (128,) if dry else (1024, 4096, 16384, 32768)
    extra: dict[str, Callable[..., torch.Tensor]] = {}
    # optional peers, benchmarks only (not dependencies of eff-kernels)
    sage = _optional("sageattention")
    if sage is not None:
        extra["sageattention.sageattn"] = lambda q, k, v, c: sage.sageattn(
            q, k, v, tensor_layout="HND", is_causal=c
        )
    else:
        out["sageattention"] = "not installed"
    fa = _optional("flash_attn")
    if fa is not None:
        extra["flash_attn"] = lambda q, k, v, c: fa.flash_attn_func(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=c
        )
    else:
        out["flash_attn"] = "not installed"
    for d in dims:
        for n_ in seqs:
            for causal in (False, True):
                if time.perf_counter() - t_start > TIME_BUDGET_S:
                    out["timing"].append(
                        {"head_dim": d, "seq": n_, "causal": causal, "skipped": "time budget"}
                    )
                    continue
                q, k, v = (torch.randn(bb, hh, n_, d, device=device, dtype=dtype) for _ in range(3))
                flops = 4.0 * n_ * n_ * d * bb * hh / (2 if causal else 1)
                warm, it = _iters(n_, dry)
                fns: dict[str, Callable[[], Any]] = {}
                if cuda:
                    from torch.nn.attention import SDPBackend, sdpa_kernel

                    def sdpa(q=q, k=k, v=v, c=causal):
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=c)

                    fns["torch sdpa (flash)"] = sdpa
                else:
                    fns["torch sdpa"] = lambda q=q, k=k, v=v, c=causal: (
                        F.scaled_dot_product_attention(q, k, v, is_causal=c)
                    )
                for pv in ("fp16", "fp8") + (("fp4",) if n_ <= 4096 else ()):
                    prep = prepare(
                        q,
                        k,
                        v,
                        sm_scale=d**-0.5,
                        qk="fp4" if pv == "fp4" else "int8",
                        pv=pv,
                        smooth_q=pv == "fp4",
                    )
                    fns[
                        f"ours int8+{pv} kernel" if pv != "fp4" else "ours nvfp4 (emulated) kernel"
                    ] = lambda p=prep, c=causal: triton_forward(p, None, 0, c, dtype, False)
                    if pv != "fp4":
                        fns[f"ours int8+{pv} incl. quantization"] = (
                            lambda q=q, k=k, v=v, c=causal, p=pv: sage_attention(
                                q, k, v, is_causal=c, pv_dtype=p, backend="triton"
                            )
                        )
                for name, fn in extra.items():
                    if cuda:
                        fns[name] = lambda fn=fn, q=q, k=k, v=v, c=causal: fn(q, k, v, c)
                for name, fn in fns.items():
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", FP4EmulationWarning)
                            sec = _timer(fn, warm, it, cuda)
                        out["timing"].append(
                            {
                                "method": name,
                                "head_dim": d,
                                "seq": n_,
                                "causal": causal,
                                "ms": sec * 1e3,
                                "tops": flops / sec / 1e12,
                            }
                        )
                    except (
                        Exception
                    ) as exc:  # a baseline that cannot run at this size is reported, not fatal
                        out["timing"].append(
                            {
                                "method": name,
                                "head_dim": d,
                                "seq": n_,
                                "causal": causal,
                                "error": f"{type(exc).__name__}: {exc}"[:300],
                            }
                        )
                del q, k, v
                if cuda:
                    torch.cuda.empty_cache()
    for r in out["timing"]:
        if "tops" in r:
            echo(
                f"  D={r['head_dim']:3d} N={r['seq']:6d} causal={int(r['causal'])} {r['method']:38s} {r['ms']:9.3f} ms {r['tops']:8.2f} TOPS"
            )
    out["ok"] = not bad
    return out


def _lrqk(dry: bool, device: torch.device, echo: Callable[[str], None]) -> dict[str, Any]:
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from eff_kernels.lrqk import LRQKConfig, enable_lrqk

    cuda = device.type == "cuda"
    if dry:
        mcfg = LlamaConfig(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=1,
            max_position_embeddings=512,
        )
        ctx, new, lcfg = 96, 4, LRQKConfig(rank=8, top_k=16, window=8, pin_memory=False)
    else:
        mcfg = LlamaConfig(
            vocab_size=32000,
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            max_position_embeddings=40000,
        )
        ctx, new, lcfg = 32768, 16, LRQKConfig(rank=32, top_k=2048, window=64)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    model = LlamaForCausalLM(mcfg).to(device, dtype).eval()
    ids = torch.randint(0, mcfg.vocab_size, (1, ctx), device=device)
    rows = []
    out: dict[str, Any] = {"context": ctx, "new_tokens": new}

    def measure(name: str, make_cache: Callable[[], Any], impl: str) -> None:
        try:

            def gen(n_new: int) -> tuple[float, torch.Tensor]:
                cache = make_cache()
                model.set_attn_implementation(impl)
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                with torch.no_grad():
                    toks = model.generate(
                        ids,
                        max_new_tokens=n_new,
                        min_new_tokens=n_new,
                        do_sample=False,
                        cache=cache,
                    )
                if cuda:
                    torch.cuda.synchronize()
                return time.perf_counter() - t0, toks

            t1, _ = gen(1)
            tn, toks = gen(1 + new)
            peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
            rows.append(
                {
                    "cache": name,
                    "decode_tok_s": new / max(tn - t1, 1e-9),
                    "prefill_s": t1,
                    "peak_mem_gib": peak,
                    "tokens": toks[0, -new:].tolist(),
                }
            )
        except Exception as exc:
            rows.append({"cache": name, "error": f"{type(exc).__name__}: {exc}"[:300]})

    measure("DynamicCache (GPU only)", lambda: DynamicCache(config=mcfg), "sdpa")
    if cuda:
        measure(
            "DynamicCache(offloading=True)",
            lambda: DynamicCache(config=mcfg, offloading=True),
            "sdpa",
        )
    else:
        rows.append(
            {"cache": "DynamicCache(offloading=True)", "error": "skipped: offloading needs CUDA"}
        )
    holder: dict[str, Any] = {}

    def lrqk_cache() -> Any:
        holder["cache"] = enable_lrqk(model, lcfg)
        return holder["cache"]

    measure(f"LRQK (r={lcfg.rank}, k={lcfg.top_k}, w={lcfg.window})", lrqk_cache, "lrqk")
    cache = holder.get("cache")
    if cache is not None and cache.layers[0].state is not None:
        layers = [lay.state for lay in cache.layers if lay.state is not None]
        steps = max(1, layers[0].steps)
        rows_moved = sum(s.store.transferred for s in layers)
        head_dim = mcfg.hidden_size // mcfg.num_attention_heads
        kv_bytes = 2 * head_dim * torch.finfo(dtype).bits // 8  # one token's K and V row, one head
        out["lrqk_rows_transferred_per_step"] = rows_moved / steps
        out["lrqk_bytes_transferred_per_step"] = rows_moved / steps * kv_bytes
        out["lrqk_hit_rate"] = sum(s.store.hit_rate for s in layers) / len(layers)
    out["rows"] = rows
    for r in rows:
        echo(
            f"  {r['cache']:40s} "
            + (
                f"{r['decode_tok_s']:9.2f} tok/s  peak {r['peak_mem_gib']:.2f} GiB"
                if "error" not in r
                else r["error"]
            )
        )
    out["ok"] = all("error" not in r for r in rows if "offloading" not in r["cache"])
    return out


def _paretoq(dry: bool, device: torch.device, echo: Callable[[str], None]) -> dict[str, Any]:
    from eff_kernels.paretoq import init_scale, lowbit_matmul, pack_weight

    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    size = 128 if dry else 4096
    ms = (1, 4) if dry else (1, 16, 128)
    rows = []
    g = torch.Generator(device="cpu").manual_seed(0)
    w = (torch.randn(size, size, generator=g) * 0.02).to(device)
    for bits in (1.58, 2, 4):
        alpha = init_scale(w, bits)
        packed = pack_weight(w, alpha, bits)
        for m in ms:
            x = torch.randn(m, size, generator=g).to(device, dtype)
            y_t = lowbit_matmul(x, packed, alpha, bits, size, backend="triton")
            y_r = lowbit_matmul(x, packed, alpha, bits, size, backend="reference")
            err = float((y_t.float() - y_r.float()).norm() / y_r.float().norm())
            warm, it = (1, 2) if dry else (10, 50)
            wd = w.to(dtype)
            t_ref = _timer(lambda x=x, wd=wd: torch.mm(x, wd.t()), warm, it, cuda)
            t_low = _timer(
                lambda x=x, p=packed, a=alpha, b=bits: lowbit_matmul(
                    x, p, a, b, size, backend="triton"
                ),
                warm,
                it,
                cuda,
            )
            bytes_low = packed.nbytes + alpha.nbytes + x.nbytes + m * size * x.element_size()
            bytes_ref = wd.nbytes + x.nbytes + m * size * x.element_size()
            flops = 2.0 * m * size * size
            rows.append({
                "bits": bits, "M": m, "N=K": size, "rel_err_vs_ref": err, "ok": err <= 1e-2,
                "lowbit_ms": t_low * 1e3, "bf16_mm_ms": t_ref * 1e3, "speedup": t_ref / t_low,
                "lowbit_gb_s": bytes_low / t_low / 1e9, "bf16_gb_s": bytes_ref / t_ref / 1e9,
                "lowbit_tflops": flops / t_low / 1e12, "hbm_bound_tb_s": H200["hbm_tb_s"],
            })  # fmt: skip
    for r in rows:
        echo(
            f"  bits={r['bits']:<4} M={r['M']:<4} low-bit {r['lowbit_ms']:.3f} ms ({r['lowbit_gb_s']:.1f} GB/s) vs bf16 {r['bf16_mm_ms']:.3f} ms: {r['speedup']:.2f}x  rel.err {r['rel_err_vs_ref']:.1e}"
        )
    return {"rows": rows, "ok": all(r["ok"] for r in rows)}


@threads(1)
def run_bench(
    dry_run: bool = False,
    sections: list[str] | tuple[str, ...] = SECTIONS,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the chosen sections; returns a JSON-able dict whose ``ok`` says whether every check passed.

    Without ``dry_run`` a CUDA device is required (RuntimeError otherwise). Runs at one torch
    thread (restored after).
    """
    for s in sections:
        if s not in SECTIONS:
            raise ValueError(f"sections must be drawn from {SECTIONS}, got {s!r}")
    if not dry_run and not torch.cuda.is_available():
        raise RuntimeError("the GPU benchmark needs CUDA; use --dry-run to check it on CPU")
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dry_run": dry_run,
        "torch": torch.__version__,
        "limits_h200": H200,
    }
    failures = []
    for s in sections:
        echo(f"== {s}")
        t = time.perf_counter()
        try:
            if s == "attention":
                res[s] = _attention(dry_run, device, echo, t0)
            elif s == "lrqk":
                res[s] = _lrqk(dry_run, device, echo)
            else:
                res[s] = _paretoq(dry_run, device, echo)
            if not res[s]["ok"]:
                failures.append(s)
        except Exception:
            res[s] = {"error": traceback.format_exc(), "ok": False}
            failures.append(s)
            echo(res[s]["error"])
        res[s]["seconds"] = time.perf_counter() - t
    res["seconds"] = time.perf_counter() - t0
    res["failed"] = failures
    res["ok"] = not failures
    echo(f"total {res['seconds']:.1f} s; failed sections: {failures or 'none'}")
    return res

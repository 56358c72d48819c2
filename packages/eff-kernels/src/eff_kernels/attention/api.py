"""The public API of :mod:`eff_kernels.attention` (re-exported there): :func:`sage_attention`,
:func:`sage_attention3`, :func:`sage_reference`, :func:`p_quant_attention`,
:func:`kv_bytes_per_token`, :func:`patch_sdpa` and :func:`register_transformers`."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from eff_kernels.attention.backward import (
    AttentionOptions,
    ExactBwdFunction,
    SageBwdFunction,
    natural_lse,
    run_forward,
)
from eff_kernels.attention.common import (
    BACKENDS,
    BACKWARDS,
    FP4_FORMATS,
    LAYOUTS,
    PV_DTYPES,
    QK_DTYPES,
    check_inputs,
    mask_4d,
    padded_dim,
    prepare,
    warn_fp4_emulation,
)
from eff_kernels.attention.forward import reference_forward
from eff_kernels.quant import (
    fp8_e4m3_per_channel,
    int8_per_block,
)
from eff_shared.errors import check_choice

__all__ = [
    "kv_bytes_per_token",
    "p_quant_attention",
    "patch_sdpa",
    "register_transformers",
    "sage_attention",
    "sage_attention3",
    "sage_reference",
]


# ---------------------------------------------------------------------------------------------
# public API


def _resolve_backend(backend: str, device: torch.device, qk: str) -> str:
    check_choice("backend", backend, BACKENDS)
    if backend == "cuda":
        if not torch.cuda.is_available() or device.type != "cuda":
            raise RuntimeError(
                "backend='cuda' needs CUDA tensors on a machine with CUDA "
                f"(CUDA available: {torch.cuda.is_available()}, tensors on {device})"
            )
        return "triton"
    if backend == "auto":
        return "triton" if device.type == "cuda" else "reference"
    return backend


def sage_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    qk_dtype: str | None = None,
    pv_dtype: str = "fp16",
    qk_granularity: str | None = None,
    smooth_k: bool = True,
    smooth_q: bool | None = None,
    backend: str = "auto",
    backward: str | None = None,
    layout: str = "HND",
    return_lse: bool = False,
    fp4_format: str = "nvfp4",
    per_block_mean: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Quantized attention with the positional signature of ``F.scaled_dot_product_attention``.

    ``pv_dtype``: ``"fp16"`` (SageAttention2 INT8 Q·Kᵀ + 16-bit P·V, the Triton path of every GPU),
    ``"fp8"`` (P̃·448 and per-channel V in E4M3, sm89/sm90 CUDA path), ``"int8"`` (SageBwd's
    forward) or ``"fp4"`` (SageAttention3: Q, K, P, V in NVFP4, or MXFP4 with ``fp4_format``).
    ``qk_dtype`` defaults to ``"int8"``, or ``"fp4"`` with ``pv_dtype="fp4"``.
    ``qk_granularity`` of the INT8 Q·Kᵀ scales: ``"per_thread"`` (the default, SageAttention2's
    CUDA granularity), ``"per_warp"`` or ``"per_block"`` (the upstream Triton path's); None means
    per thread, except for ``backward="sagebwd"`` training, whose forward quantizes Q per block of
    64 tokens unless a granularity is given.
    ``smooth_q`` (Q smoothing with the ΔS correction) defaults to True for fp4 only.

    ``backend``: ``"reference"`` (PyTorch emulation), ``"triton"`` (Triton kernels, interpreted on
    CPU), ``"cuda"`` (the Triton kernels compiled for CUDA; RuntimeError without CUDA) or
    ``"auto"`` (CUDA tensors → kernels, CPU tensors → reference).

    ``backward``: None raises when an input requires grad (SageAttention is inference-only and must
    never cut a gradient silently); ``"sagebwd"`` runs SageBwd's INT8 forward and backward;
    ``"exact"`` keeps the quantized forward and back-propagates exact fp32 attention.

    ``attn_mask`` (bool: True = attend, or additive float) is supported, unlike upstream. Head dims
    other than 64/128/256 are zero-padded. Returns O (same dtype and layout as ``query``) and, with
    ``return_lse``, the natural-log LSE (B, H, N) in float32.
    """
    check_choice("layout", layout, LAYOUTS)
    check_choice("pv_dtype", pv_dtype, PV_DTYPES)
    check_choice("backward", backward, BACKWARDS)
    if qk_granularity is not None:
        check_choice("qk_granularity", qk_granularity, ("per_block", "per_warp", "per_thread"))
    check_choice("fp4_format", fp4_format, FP4_FORMATS)
    qk = qk_dtype if qk_dtype is not None else ("fp4" if pv_dtype == "fp4" else "int8")
    check_choice("qk_dtype", qk, QK_DTYPES)
    if (qk == "fp4") != (pv_dtype == "fp4"):
        raise ValueError(
            f"qk_dtype={qk!r} with pv_dtype={pv_dtype!r} is not a SageAttention scheme: "
            "use qk_dtype='fp4' only with pv_dtype='fp4' (SageAttention3)"
        )
    sq = (qk == "fp4") if smooth_q is None else bool(smooth_q)
    if sq and qk != "fp4":
        raise ValueError(
            "smooth_q is part of the fp4 scheme (SageAttention3); use it with pv_dtype='fp4'"
        )
    check_inputs(query, key, value, attn_mask, is_causal, enable_gqa, layout)
    if dropout_p:
        raise NotImplementedError("dropout_p > 0 is not supported by the quantized attention paths")
    device = query.device
    be = _resolve_backend(backend, device, qk)
    if qk == "fp4":
        warn_fp4_emulation(device)

    q, k, v = (
        (query, key, value) if layout == "HND" else (t.transpose(1, 2) for t in (query, key, value))
    )
    b, hq, n, d = q.shape
    m = k.shape[2]
    sm_scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if needs_grad and backward is None:
        raise RuntimeError(
            "sage_attention got inputs that require grad but backward=None: SageAttention's forward is "
            "inference-only and would silently cut the gradient. Pass backward='sagebwd' (INT8 "
            "training attention) or backward='exact' (quantized forward, exact fp32 backward)."
        )
    if needs_grad and attn_mask is not None and attn_mask.requires_grad:
        raise NotImplementedError("gradients with respect to attn_mask are not supported")
    if needs_grad and backward == "sagebwd" and pv_dtype == "fp4":
        raise ValueError("backward='sagebwd' is INT8 training attention; it has no fp4 variant")
    sagebwd = needs_grad and backward == "sagebwd"
    granularity = qk_granularity or ("per_block" if sagebwd else "per_thread")

    if n == 0 or m == 0:
        out = q.new_zeros(b, hq, n, d)
        out = out + 0 * (q.sum() + k.sum() + v.sum()) if needs_grad else out
        lse = torch.full((b, hq, n), float("-inf"), device=device)
        out = out if layout == "HND" else out.transpose(1, 2)
        return (out, lse) if return_lse else out

    dp = padded_dim(d)
    if dp != d:
        q, k, v = (F.pad(t, (0, dp - d)) for t in (q, k, v))
    mask4, mode = mask_4d(attn_mask, b, hq, n, m)
    opt = AttentionOptions(
        scale=sm_scale,
        is_causal=bool(is_causal),
        qk=qk,
        pv=pv_dtype,
        granularity=granularity,
        smooth_k=bool(smooth_k),
        smooth_q=sq,
        q_smooth_block=128 if per_block_mean else None,
        fmt=fp4_format,
        backend=be,
        enable_gqa=bool(enable_gqa),
    )
    if needs_grad:
        fn = SageBwdFunction if backward == "sagebwd" else ExactBwdFunction
        out, lse = fn.apply(q, k, v, mask4, mode, opt)
    else:
        with torch.no_grad():
            out, m_i, l_i, prep = run_forward(q, k, v, mask4, mode, opt, store_ml=return_lse)
            lse = natural_lse(q, m_i, l_i, prep) if return_lse else None
    out = out[..., :d]
    if layout == "NHD":
        out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def sage_attention3(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    per_block_mean: bool = True,
    emulate: bool | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """SageAttention3 (``sageattn3_blackwell``): NVFP4 Q, K, P, V with K smoothing and Q smoothing.

    ``per_block_mean``: Q smoothing per block of 128 tokens (True, upstream default) or one mean over
    all tokens. ``emulate``: None → native FP4 only on sm100/sm120 with the upstream ``sageattn3``
    package, emulated elsewhere (one-time :class:`FP4EmulationWarning`); False on any other device
    raises RuntimeError.
    """
    if emulate is False:
        dev = q.device
        native = (
            dev.type == "cuda"
            and torch.cuda.get_device_capability(dev)[0] in (10, 12)
            and _has_module("sageattn3")
        )
        if not native:
            raise RuntimeError(
                "emulate=False needs FP4 tensor cores (sm100/sm120) and the sageattn3 package; "
                f"this device is {dev}"
            )
        sageattn3 = importlib.import_module("sageattn3")  # optional, Blackwell only

        return sageattn3.sageattn3_blackwell(
            q, k, v, is_causal=is_causal, per_block_mean=per_block_mean
        )
    return sage_attention(
        q,
        k,
        v,
        is_causal=is_causal,
        scale=scale,
        pv_dtype="fp4",
        per_block_mean=per_block_mean,
        backend=backend,
    )  # type: ignore[return-value]


def _has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def sage_reference(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    qk_dtype: str = "int8",
    pv_dtype: str = "fp16",
    smooth_k: bool = True,
    smooth_q: bool = False,
    fp4_format: str = "nvfp4",
    two_level: bool = True,
    qk_granularity: str = "per_thread",
    block_n: int | None = None,
    v_exact: bool = False,
) -> torch.Tensor:
    """The PyTorch emulation of one scheme on (B, H, N, D) inputs (any ``qk_dtype``/``pv_dtype``
    combination, including ``"none"`` for exact float32 operands; ``v_exact`` quantizes P but not
    V); float32 output.

    Used for ablations that the public API does not expose (one-level P, P-only quantization).
    """
    check_choice("qk_dtype", qk_dtype, (*QK_DTYPES, "none"))
    check_choice("pv_dtype", pv_dtype, (*PV_DTYPES, "none"))
    d = query.shape[-1]
    dp = padded_dim(d)
    q, k, v = (F.pad(t, (0, dp - d)) for t in (query, key, value))
    prep = prepare(
        q,
        k,
        v,
        sm_scale=float(scale) if scale is not None else 1.0 / math.sqrt(d),
        qk=qk_dtype,
        pv=pv_dtype,
        granularity=qk_granularity,
        smooth_k=smooth_k,
        smooth_q=smooth_q,
        fmt=fp4_format,
        two_level=two_level,
        block_n=block_n,
        v_exact=v_exact,
    )
    with torch.no_grad():
        out, _, _ = reference_forward(prep, None, 0, is_causal)
    return out[..., :d]


def p_quant_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    two_level: bool = True,
    fmt: str = "nvfp4",
    scale: float | None = None,
) -> torch.Tensor:
    """Attention with only P̃ quantized (Q, K, V exact): isolates the two-level P scaling (SageAttention3)."""
    return sage_reference(
        q,
        k,
        v,
        scale=scale,
        qk_dtype="none",
        pv_dtype="fp4",
        smooth_k=False,
        fp4_format=fmt,
        two_level=two_level,
        v_exact=True,
    )


def kv_bytes_per_token(fmt: str, head_dim: int = 64, tokens: int = 1024) -> dict[str, float]:
    """Bytes of one token's K and V (one head) in a format, measured from quantized tensors.

    ``fmt``: ``"fp16"``, ``"int8-fp16"`` (INT8 K per 64-token block + fp16 V), ``"int8-fp8"`` (INT8 K +
    FP8 per-channel V), ``"nvfp4"`` or ``"mxfp4"`` (packed nibbles + block scales for K and V).
    Returns bytes per token and the ratio to fp16.
    """
    from eff_kernels.quant import mxfp4_quantize, nvfp4_quantize

    check_choice("fmt", fmt, ("fp16", "int8-fp16", "int8-fp8", "nvfp4", "mxfp4"))
    x = torch.randn(1, 1, tokens, head_dim)
    if fmt == "fp16":
        nbytes = 2 * x.half().nbytes
    elif fmt.startswith("int8"):
        ki8, ks = int8_per_block(x, 64)
        nbytes = ki8.nbytes + ks.nbytes
        if fmt == "int8-fp16":
            nbytes += x.half().nbytes
        else:
            v8, vs = fp8_e4m3_per_channel(x)
            nbytes += v8.nbytes + vs.nbytes
    else:
        quant = nvfp4_quantize if fmt == "nvfp4" else mxfp4_quantize
        kp, kscale = quant(x, -1)
        vp, vscale = quant(x, -2)
        nbytes = kp.nbytes + kscale.nbytes + vp.nbytes + vscale.nbytes
    per_token = nbytes / tokens
    return {"bytes_per_token": per_token, "ratio_to_fp16": per_token / (4 * head_dim)}


@contextlib.contextmanager
def patch_sdpa(**sage_kwargs: Any) -> Iterator[None]:
    """Replace ``torch.nn.functional.scaled_dot_product_attention`` by :func:`sage_attention` inside the block.

    Keyword arguments configure it (e.g. ``pv_dtype="fp8"``, ``backward="sagebwd"``). Code that
    imported the function object before entering (``from torch.nn.functional import
    scaled_dot_product_attention``) keeps the original. Restored on exit, even after an exception.
    """
    original = F.scaled_dot_product_attention
    patched = functools.partial(sage_attention, **sage_kwargs)
    F.scaled_dot_product_attention = patched  # type: ignore[assignment]
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original  # type: ignore[assignment]


def register_transformers(name: str = "sage", **sage_kwargs: Any) -> str:
    """Register :func:`sage_attention` as a transformers attention implementation called ``name``.

    Afterwards ``model.set_attn_implementation(name)`` (or ``attn_implementation=name`` when building a
    model) routes attention through it; masks are built as for ``"sdpa"``. Keyword arguments configure
    it (``pv_dtype``, ``backward="sagebwd"`` for training, ...). Returns ``name``.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    AttentionInterface.register(name, functools.partial(_transformers_attention, **sage_kwargs))
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def _transformers_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface (mirrors ``sdpa_attention_forward``)."""
    sage_kwargs = {k: v for k, v in kwargs.items() if k in _SAGE_KWARGS}
    n = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(n > 1 and attention_mask is None and causal)
    if causal and key.shape[2] > n:
        key, value = key[:, :, :n], value[:, :, :n]
    out = sage_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        **sage_kwargs,
    )
    return out.transpose(1, 2).contiguous(), None  # type: ignore[union-attr]


_SAGE_KWARGS = {
    "qk_dtype",
    "pv_dtype",
    "qk_granularity",
    "smooth_k",
    "smooth_q",
    "backend",
    "backward",
    "fp4_format",
    "per_block_mean",
}

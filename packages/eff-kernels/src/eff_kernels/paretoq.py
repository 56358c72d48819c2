"""ParetoQ: unified 1/1.58/2/3/4-bit weight-only quantization-aware training.

Paper: "ParetoQ: Scaling Laws in Extremely Low-bit LLM Quantization" (arXiv 2502.02631, NeurIPS
2025); code ``facebookresearch/ParetoQ`` @ 655e338 (``models/utils_quant.py``, ``train.py``).

Every ``nn.Linear`` gets one learnable scale α per output row (``weight_clip_val``) and a
bit-width-specific quantizer, x = w/α:

=======  ==========  =================================================  ====================
bits     quantizer   forward w_q                                        α init (per row)
=======  ==========  =================================================  ====================
1        LSQ-binary  α·sign(w)                                          mean|w|
1.58     SEQ n=1.5   α·round(1.5·clip(x, ±0.99))/1.5 ∈ α·{−⅔, 0, ⅔}     max|w|
2        SEQ n=2     α·(round(2·clip(x, ±0.99) − ½) + ½)/2 ∈ α·{±¼, ±¾}  max|w|
3, 4     LSQ         α·clamp(round(x), −2^{b−1}, 2^{b−1}−1)             max|w|/(2^{b−1}−1)
=======  ==========  =================================================  ====================

SEQ ("stretched elastic quant") splits [−α, α] into equal bins reconstructed at their centres: a
balanced grid without a zero level at 2 bits. Backward (LSQ-style straight-through estimator):
grad_w = g·1[x in range] (LSQ: [Qn, Qp], binary |x| ≤ 1, SEQ |x| ≤ 0.99);
grad_α = Σ_row g·gs·{Qn below, Qp above, q(x) − x inside} with gs = 1/sqrt(numel(W)·Qp_int)
(Qp_int = 1 for 1/1.58/2 bits, 3 for 3-bit, 7 for 4-bit; SEQ's saturation value is
Qp = (n − shift)/n: 1 for ternary — though the saturated level is ⅔, an upstream quirk kept here — and
¾ for 2-bit); binary grad_α = Σ sign(w)·g·gs. α is clamped ≥ 1e-5. "1.58-bit" is ``w_bits=0`` in
the official code.

torchao-like flow: :func:`quantize_` (prepare: ``nn.Linear`` → :class:`QATLinear`, in place),
train, :func:`convert_` (→ :class:`PackedLinear`: codes packed 1/2/4 bits per weight plus the
per-row scale, computed by :func:`lowbit_matmul` — a Triton dequantize-in-kernel GEMM on CUDA).

Convolutions (our extension; the paper and its code quantize Linear layers only): with
``ParetoQConfig(conv2d=True)`` every ``nn.Conv2d`` becomes a :class:`QATConv2d` whose weight is read
as the matrix (out_channels, in_channels/groups·k_h·k_w) — the Linear that a convolution applies to
im2col patches — so the same quantizers, α per output channel and STEs apply unchanged;
:func:`convert_` packs it into a :class:`PackedConv2d`. This covers the factorised layers of
``eff_vision.tensor_compress`` (1×1 → k×k → 1×1, or depthwise k×k).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eff_shared.errors import check_choice

__all__ = [
    "BITS",
    "LSQFunction",
    "PackedConv2d",
    "PackedLinear",
    "ParetoQConfig",
    "QATConv2d",
    "QATLinear",
    "SEQFunction",
    "convert_",
    "fake_quant",
    "init_scale",
    "lowbit_matmul",
    "pack_weight",
    "quantize_",
    "unpack_weight",
    "w2a16_matmul",
]

BITS = (1, 1.58, 2, 3, 4)
QUANTIZERS = ("auto", "sign", "seq", "lsq")
EPS = 1e-5
CLIP = 1 - 1e-2


def _check_bits(bits: float) -> float:
    if isinstance(bits, bool) or not isinstance(bits, int | float):
        raise TypeError(f"bits must be a number, got {type(bits).__name__}")
    if bits == 0:
        raise ValueError(
            "bits must be one of (1, 1.58, 2, 3, 4), got 0 (the official code's w_bits=0 means "
            "ternary: pass bits=1.58)"
        )
    for b in BITS:
        if abs(bits - b) < 1e-9:
            return b
    raise ValueError(f"bits must be one of {BITS}, got {bits!r}")


def _resolve_quantizer(bits: float, quantizer: str) -> str:
    check_choice("quantizer", quantizer, QUANTIZERS)
    if quantizer == "auto":
        return {1: "sign", 1.58: "seq", 2: "seq", 3: "lsq", 4: "lsq"}[bits]
    if quantizer == "sign" and bits != 1:
        raise ValueError(f"quantizer 'sign' is the 1-bit quantizer, got bits={bits}")
    if bits == 1 and quantizer != "sign":
        raise ValueError(f"1-bit weights use quantizer 'sign' (or 'auto'), got {quantizer!r}")
    return quantizer


def _qp_int(bits: float) -> int:
    """Upstream's integer Qp, used in the gradient scale: 1 for 1/1.58/2 bits, 3 for 3, 7 for 4."""
    return 1 if bits in (1, 1.58) else 2 ** (int(bits) - 1) - 1


def _lsq_range(bits: float) -> tuple[int, int]:
    if bits in (1, 1.58):
        return -1, 1
    return -(2 ** (int(bits) - 1)), 2 ** (int(bits) - 1) - 1


def _seq_levels(bits: float) -> tuple[float, float]:
    """(n, shift) of the stretched grid: ternary (1.5, 0), b bits (2^{b−1}, ½)."""
    return (1.5, 0.0) if bits == 1.58 else (float(2 ** (int(bits) - 1)), 0.5)


def _reduce_to(grad: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Sum a per-element gradient to the shape of α (per row: sum over columns; per tensor: all)."""
    if alpha.numel() == 1:
        return grad.sum().reshape(alpha.shape)
    return grad.sum(dim=-1, keepdim=True)


class LSQFunction(torch.autograd.Function):
    """Binary (sign) and LSQ quantizer with its straight-through estimator (``LsqBinaryTernaryExtension``)."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, alpha: torch.Tensor, bits: float) -> torch.Tensor:  # type: ignore[override]
        alpha = torch.where(alpha > EPS, alpha, torch.full_like(alpha, EPS))
        qn, qp = _lsq_range(bits)
        ctx.save_for_backward(w, alpha)
        ctx.bits, ctx.qn, ctx.qp = bits, qn, qp
        ctx.gs = 1.0 / math.sqrt(w.numel() * _qp_int(bits))
        q = w.sign() if bits == 1 else (w / alpha).round().clamp(qn, qp)
        return q * alpha

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        w, alpha = ctx.saved_tensors
        x = w / alpha
        small = (x < ctx.qn).to(g.dtype)
        big = (x > ctx.qp).to(g.dtype)
        middle = 1.0 - small - big
        if ctx.bits == 1:
            ga = w.sign() * g * ctx.gs
        else:
            ga = (small * ctx.qn + big * ctx.qp + middle * (x.round() - x)) * g * ctx.gs
        return middle * g, _reduce_to(ga, alpha), None


class SEQFunction(torch.autograd.Function):
    """Stretched elastic quantizer (ternary and 2-bit) with its straight-through estimator."""

    @staticmethod
    def forward(ctx, w: torch.Tensor, alpha: torch.Tensor, bits: float) -> torch.Tensor:  # type: ignore[override]
        alpha = torch.where(alpha > EPS, alpha, torch.full_like(alpha, EPS))
        n, shift = _seq_levels(bits)
        ctx.save_for_backward(w, alpha)
        ctx.n, ctx.shift = n, shift
        ctx.qp = (n - shift) / n
        ctx.gs = 1.0 / math.sqrt(w.numel() * _qp_int(bits))
        q = (torch.round(torch.clamp(w / alpha, -CLIP, CLIP) * n - shift) + shift) / n
        return q * alpha

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        w, alpha = ctx.saved_tensors
        x = w / alpha
        small = (x < -CLIP).to(g.dtype)
        big = (x > CLIP).to(g.dtype)
        middle = 1.0 - small - big
        q = (torch.round(torch.clamp(x, -CLIP, CLIP) * ctx.n - ctx.shift) + ctx.shift) / ctx.n
        ga = (small * -ctx.qp + big * ctx.qp + middle * (q - x)) * g * ctx.gs
        return middle * g, _reduce_to(ga, alpha), None


def fake_quant(
    w: torch.Tensor, alpha: torch.Tensor, bits: float, quantizer: str = "auto"
) -> torch.Tensor:
    """ParetoQ's quantize-dequantize of ``w`` with scale ``alpha`` (differentiable through the STE)."""
    bits = _check_bits(bits)
    q = _resolve_quantizer(bits, quantizer)
    if q == "seq":
        return SEQFunction.apply(w, alpha, bits)
    return LSQFunction.apply(w, alpha, bits)


def init_scale(w: torch.Tensor, bits: float, granularity: str = "per_channel") -> torch.Tensor:
    """α initialisation of ``train.py``: mean|w| (1 bit), max|w| (1.58, 2), max|w|/(2^{b−1}−1) (3, 4)."""
    bits = _check_bits(bits)
    check_choice("granularity", granularity, ("per_channel", "per_tensor"))
    a = w.detach().abs()
    if granularity == "per_tensor":
        a = a.reshape(1, -1)
    if bits == 1:
        s = a.mean(dim=-1, keepdim=True)
    elif bits in (1.58, 2):
        s = a.amax(dim=-1, keepdim=True)
    else:
        s = a.amax(dim=-1, keepdim=True) / (2 ** (int(bits) - 1) - 1)
    return s.reshape(1, 1) if granularity == "per_tensor" else s


@dataclass(frozen=True)
class ParetoQConfig:
    """What :func:`quantize_` applies: bit width, quantizer, scale granularity, excluded modules;
    ``conv2d=True`` also quantizes ``nn.Conv2d`` layers (:class:`QATConv2d`), off by default."""

    bits: float
    quantizer: str = "auto"  # "auto" -> sign | seq | seq | lsq | lsq
    granularity: str = "per_channel"  # or "per_tensor" (upstream's weight_layerwise)
    learnable_scale: bool = True
    exclude: tuple[str, ...] = ("lm_head", "embed_tokens")
    # A NaN/inf weight or collapsed scale would otherwise give NaN outputs without a word.
    check_finite: bool = True
    conv2d: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", _check_bits(self.bits))
        if not isinstance(self.conv2d, bool):
            raise TypeError(f"conv2d must be a bool, got {type(self.conv2d).__name__}")
        _resolve_quantizer(self.bits, self.quantizer)
        check_choice("granularity", self.granularity, ("per_channel", "per_tensor"))
        if isinstance(self.exclude, str):
            raise TypeError("exclude must be a tuple of module names, got a string")


class QATLinear(nn.Linear):
    """``nn.Linear`` whose weight is fake-quantized by ParetoQ in every forward (``QuantizeLinear``)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        bits: float = 2,
        quantizer: str = "auto",
        granularity: str = "per_channel",
        learnable_scale: bool = True,
        check_finite: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.bits = _check_bits(bits)
        self.quantizer = _resolve_quantizer(self.bits, quantizer)
        self.granularity = granularity
        self.check_finite = check_finite
        alpha = init_scale(self.weight, self.bits, granularity).float()
        if learnable_scale:
            self.weight_clip_val = nn.Parameter(alpha)
        else:
            self.register_buffer("weight_clip_val", alpha)

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, bits: float, *, quantizer: str = "auto", granularity: str = "per_channel",
        learnable_scale: bool = True, check_finite: bool = True,
    ) -> QATLinear:  # fmt: skip
        """A QATLinear with ``linear``'s weight and bias and α initialised from its weight."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be an nn.Linear, got {type(linear).__name__}")
        if isinstance(linear, QATLinear):
            raise TypeError("linear is already a QATLinear")
        if not linear.weight.is_floating_point():
            raise TypeError(f"cannot quantize integer weights (dtype {linear.weight.dtype})")
        if linear.weight.dim() != 2:
            raise ValueError(
                f"QATLinear needs a 2-D weight, got shape {tuple(linear.weight.shape)}"
            )
        new = cls(
            linear.in_features, linear.out_features, linear.bias is not None, bits=bits, quantizer=quantizer,
            granularity=granularity, learnable_scale=learnable_scale, check_finite=check_finite,
            device=linear.weight.device, dtype=linear.weight.dtype,
        )  # fmt: skip
        with torch.no_grad():
            new.weight.copy_(linear.weight)
            if linear.bias is not None:
                new.bias.copy_(linear.bias)
            new.weight_clip_val.copy_(init_scale(linear.weight, new.bits, granularity))
        return new

    def quantized_weight(self) -> torch.Tensor:
        if self.weight.dim() != 2:
            raise ValueError(f"QATLinear needs a 2-D weight, got shape {tuple(self.weight.shape)}")
        return fake_quant(self.weight, self.weight_clip_val, self.bits, self.quantizer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.quantized_weight()
        if self.check_finite and not bool(torch.isfinite(w).all()):
            raise FloatingPointError(
                "ParetoQ: non-finite quantized weight (collapsed or NaN scale)"
            )
        return F.linear(x, w.to(x.dtype), self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bits={self.bits}, quantizer={self.quantizer}"


class QATConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose weight is fake-quantized by ParetoQ in every forward.

    The weight [O, I/groups, k_h, k_w] is quantized as the matrix [O, I/groups·k_h·k_w] (one row per
    output channel, the Linear a convolution applies to im2col patches): one α per output channel
    (``per_channel``) or per tensor, initialised and trained exactly as in :class:`QATLinear`.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: str | int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        bits: float = 2,
        quantizer: str = "auto",
        granularity: str = "per_channel",
        learnable_scale: bool = True,
        check_finite: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
            padding_mode, device=device, dtype=dtype,
        )  # fmt: skip
        self.bits = _check_bits(bits)
        self.quantizer = _resolve_quantizer(self.bits, quantizer)
        self.granularity = granularity
        self.check_finite = check_finite
        alpha = init_scale(self.weight.reshape(out_channels, -1), self.bits, granularity).float()
        if learnable_scale:
            self.weight_clip_val = nn.Parameter(alpha)
        else:
            self.register_buffer("weight_clip_val", alpha)

    @classmethod
    def from_conv(
        cls, conv: nn.Conv2d, bits: float, *, quantizer: str = "auto", granularity: str = "per_channel",
        learnable_scale: bool = True, check_finite: bool = True,
    ) -> QATConv2d:  # fmt: skip
        """A QATConv2d with ``conv``'s hyper-parameters, weight and bias, α from its weight."""
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        if isinstance(conv, QATConv2d):
            raise TypeError("conv is already a QATConv2d")
        if not conv.weight.is_floating_point():
            raise TypeError(f"cannot quantize integer weights (dtype {conv.weight.dtype})")
        new = cls(
            conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
            conv.dilation, conv.groups, conv.bias is not None, conv.padding_mode, bits=bits,
            quantizer=quantizer, granularity=granularity, learnable_scale=learnable_scale,
            check_finite=check_finite, device=conv.weight.device, dtype=conv.weight.dtype,
        )  # fmt: skip
        with torch.no_grad():
            new.weight.copy_(conv.weight)
            if conv.bias is not None:
                new.bias.copy_(conv.bias)
            new.weight_clip_val.copy_(
                init_scale(conv.weight.reshape(conv.out_channels, -1), new.bits, granularity)
            )
        return new

    def quantized_weight(self) -> torch.Tensor:
        """The fake-quantized weight, shaped like ``weight``."""
        w = fake_quant(
            self.weight.reshape(self.out_channels, -1), self.weight_clip_val, self.bits,
            self.quantizer,
        )  # fmt: skip
        return w.reshape(self.weight.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.quantized_weight()
        if self.check_finite and not bool(torch.isfinite(w).all()):
            raise FloatingPointError(
                "ParetoQ: non-finite quantized weight (collapsed or NaN scale)"
            )
        return self._conv_forward(x, w.to(x.dtype), self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bits={self.bits}, quantizer={self.quantizer}"


# ---------------------------------------------------------------------------------------------
# packing and the low-bit GEMM


def _grid(bits: float, quantizer: str) -> tuple[int, int, float, float]:
    """(container bits, c0, shift, n): a code c stores the level (c − c0 + shift)/n."""
    if quantizer == "sign":
        return 1, 0, -0.5, 0.5
    if quantizer == "seq":
        n, shift = _seq_levels(bits)
        c0 = 1 if bits == 1.58 else int(n)
        return (2 if bits <= 2 else 4), c0, shift, n
    qn, _ = _lsq_range(bits)
    return (2 if bits <= 2 else 4), -qn, 0.0, 1.0


def pack_weight(
    w: torch.Tensor, alpha: torch.Tensor, bits: float, quantizer: str = "auto"
) -> torch.Tensor:
    """Codes of ParetoQ's quantized ``w`` (out, in), packed along ``in`` (low bits first) into uint8."""
    bits = _check_bits(bits)
    q = _resolve_quantizer(bits, quantizer)
    cb, c0, shift, n = _grid(bits, q)
    with torch.no_grad():
        level = fake_quant(w.float(), alpha.float(), bits, q) / torch.where(
            alpha.float() > EPS, alpha.float(), torch.full_like(alpha.float(), EPS)
        )
        codes = torch.round(level * n - shift).to(torch.int64) + c0
    vpb = 8 // cb
    out_f, in_f = codes.shape
    codes = F.pad(codes, (0, (-in_f) % vpb)).reshape(out_f, -1, vpb)
    shifts = torch.arange(vpb, device=w.device) * cb
    return (codes << shifts).sum(dim=-1).to(torch.uint8)


def unpack_weight(
    packed: torch.Tensor,
    scale: torch.Tensor,
    bits: float,
    in_features: int,
    quantizer: str = "auto",
) -> torch.Tensor:
    """Dequantized weight (out, in) in float32 from packed codes and the per-row scale α."""
    bits = _check_bits(bits)
    cb, c0, shift, n = _grid(bits, _resolve_quantizer(bits, quantizer))
    vpb = 8 // cb
    shifts = torch.arange(vpb, device=packed.device) * cb
    codes = (packed.to(torch.int64).unsqueeze(-1) >> shifts) & ((1 << cb) - 1)
    codes = codes.reshape(packed.shape[0], -1)[:, :in_features]
    return (codes.float() + (shift - c0)) / n * scale.float().reshape(-1, 1)


def lowbit_matmul(
    x: torch.Tensor,
    packed_w: torch.Tensor,
    scales: torch.Tensor,
    bits: float,
    in_features: int,
    *,
    quantizer: str = "auto",
    backend: str = "auto",
) -> torch.Tensor:
    """Y = X·Wᵀ for packed low-bit W (out, in) with per-row scale α: the inference GEMM of ParetoQ.

    ``backend``: "reference" (unpack then matmul in float32), "triton" (dequantize inside the GEMM;
    interpreted on CPU) or "auto" (Triton on CUDA). x (..., in); returns (..., out) in x's dtype.
    """
    check_choice("backend", backend, ("auto", "reference", "triton"))
    bits = _check_bits(bits)
    q = _resolve_quantizer(bits, quantizer)
    if x.shape[-1] != in_features:
        raise ValueError(f"x has {x.shape[-1]} input features, the weight {in_features}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, in_features)
    use_triton = backend == "triton" or (backend == "auto" and x.is_cuda)
    if not use_triton:
        w = unpack_weight(packed_w, scales, bits, in_features, q)
        return (x2.float() @ w.t()).to(x.dtype).reshape(*lead, -1)
    from eff_kernels._triton import interpret_for, kernels, launch_env

    cb, c0, shift, n = _grid(bits, q)
    out_f = packed_w.shape[0]
    y = torch.empty(x2.shape[0], out_f, dtype=x.dtype, device=x.device)
    s = (scales.float().reshape(-1) / n).contiguous()
    interpret = interpret_for(x.device)
    mod = kernels("paretoq", x.device)
    bm = 16 if x2.shape[0] <= 16 else 64
    grid = (max(1, -(-x2.shape[0] // bm)), max(1, -(-out_f // 64)))
    with launch_env(interpret):
        mod.lowbit_matmul_kernel[grid](
            x2, packed_w, s, y, x2.shape[0], out_f, in_features,
            x2.stride(0), x2.stride(1), packed_w.stride(0), packed_w.stride(1), y.stride(0), y.stride(1),
            float(shift - c0),
            BITS=cb, BLOCK_M=bm, BLOCK_N=64, BLOCK_K=64, IEEE=x.dtype == torch.float32 or interpret,
        )  # fmt: skip
    return y.reshape(*lead, -1)


def w2a16_matmul(
    x: torch.Tensor,
    packed_w: torch.Tensor,
    scales: torch.Tensor,
    in_features: int | None = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """2-bit-weight × 16-bit-activation GEMM (SEQ codes, 4 per byte): :func:`lowbit_matmul` with bits=2."""
    return lowbit_matmul(
        x,
        packed_w,
        scales,
        2,
        in_features if in_features is not None else packed_w.shape[1] * 4,
        backend=backend,
    )


class PackedLinear(nn.Module):
    """Inference Linear with packed low-bit weight codes and a per-row scale (from :func:`convert_`)."""

    def __init__(self, qat: QATLinear, backend: str = "auto") -> None:
        super().__init__()
        self.in_features, self.out_features = qat.in_features, qat.out_features
        self.bits, self.quantizer, self.backend = qat.bits, qat.quantizer, backend
        alpha = qat.weight_clip_val.detach().float().clamp_min(EPS)
        alpha = alpha.expand(qat.out_features, 1) if alpha.numel() == 1 else alpha
        self.register_buffer("packed", pack_weight(qat.weight, alpha, qat.bits, qat.quantizer))
        self.register_buffer("scale", alpha.to(qat.weight.dtype).contiguous())
        self.bias = nn.Parameter(qat.bias.detach().clone()) if qat.bias is not None else None

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight, codes plus the per-row scale."""
        return (self.packed.nbytes + self.scale.nbytes) * 8 / (self.in_features * self.out_features)

    def dequantized_weight(self) -> torch.Tensor:
        return unpack_weight(self.packed, self.scale, self.bits, self.in_features, self.quantizer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = lowbit_matmul(
            x,
            self.packed,
            self.scale,
            self.bits,
            self.in_features,
            quantizer=self.quantizer,
            backend=self.backend,
        )
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}"


class PackedConv2d(nn.Module):
    """Inference Conv2d with packed low-bit codes (rows = output channels, as :class:`QATConv2d`)
    and a per-channel scale (from :func:`convert_`).

    Storage is packed like :class:`PackedLinear`. A 1×1 convolution with stride 1, no padding and
    ``groups=1`` is a GEMM over channels and runs through :func:`lowbit_matmul` (the Triton kernel on
    CUDA); any other convolution unpacks its (small) weight and calls ``F.conv2d``: there is no fused
    low-bit convolution kernel.
    """

    def __init__(self, qat: QATConv2d, backend: str = "auto") -> None:
        super().__init__()
        check_choice("backend", backend, ("auto", "reference", "triton"))
        self.in_channels, self.out_channels = qat.in_channels, qat.out_channels
        self.kernel_size, self.stride, self.dilation = qat.kernel_size, qat.stride, qat.dilation
        self.padding, self.groups, self.padding_mode = qat.padding, qat.groups, qat.padding_mode
        self._reversed_padding_repeated_twice = list(qat._reversed_padding_repeated_twice)
        self.bits, self.quantizer, self.backend = qat.bits, qat.quantizer, backend
        self.row_features = qat.weight[0].numel()
        alpha = qat.weight_clip_val.detach().float().clamp_min(EPS)
        alpha = alpha.expand(qat.out_channels, 1) if alpha.numel() == 1 else alpha
        w2 = qat.weight.detach().reshape(qat.out_channels, -1)
        self.register_buffer("packed", pack_weight(w2, alpha, qat.bits, qat.quantizer))
        self.register_buffer("scale", alpha.to(qat.weight.dtype).contiguous())
        self.bias = nn.Parameter(qat.bias.detach().clone()) if qat.bias is not None else None

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight, codes plus the per-channel scale."""
        return (
            (self.packed.nbytes + self.scale.nbytes) * 8 / (self.out_channels * self.row_features)
        )

    def dequantized_weight(self) -> torch.Tensor:
        """The weight [O, I/groups, k_h, k_w] in float32."""
        w = unpack_weight(self.packed, self.scale, self.bits, self.row_features, self.quantizer)
        return w.reshape(self.out_channels, self.in_channels // self.groups, *self.kernel_size)

    def _is_gemm(self) -> bool:
        return (
            self.kernel_size == (1, 1)
            and self.stride == (1, 1)
            and self.groups == 1
            and all(p == 0 for p in self._reversed_padding_repeated_twice)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        if self._is_gemm() and x.dim() == 4:
            y = lowbit_matmul(
                x.movedim(1, -1), self.packed, self.scale, self.bits, self.in_channels,
                quantizer=self.quantizer, backend=self.backend,
            ).movedim(-1, 1)  # fmt: skip
            return y + bias.reshape(1, -1, 1, 1) if bias is not None else y
        w = self.dequantized_weight().to(x.dtype)
        if self.padding_mode != "zeros":
            x = F.pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return F.conv2d(x, w, bias, self.stride, 0, self.dilation, self.groups)
        return F.conv2d(x, w, bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, groups={self.groups}, bits={self.bits}"
        )


# ---------------------------------------------------------------------------------------------
# model-level prepare / convert


def _excluded(fqn: str, exclude: tuple[str, ...]) -> bool:
    parts = fqn.split(".")
    return any(ex in parts or fqn == ex for ex in exclude)


def _set_child(model: nn.Module, fqn: str, module: nn.Module) -> None:
    parent_name, _, child = fqn.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def quantize_(
    model: nn.Module,
    config: ParetoQConfig,
    filter_fn: Callable[[nn.Module, str], bool] | None = None,
) -> nn.Module:
    """Replace (in place) every ``nn.Linear`` not excluded by ``config.exclude`` or ``filter_fn`` by a
    :class:`QATLinear` (like ``torchao.quantization.quantize_``), and with ``config.conv2d`` every
    ``nn.Conv2d`` by a :class:`QATConv2d`; returns the model.

    ``filter_fn(module, fqn)`` → True to quantize. Existing QAT modules are left alone (applying
    twice is a no-op); a model already converted to PackedLinear/PackedConv2d raises TypeError; no
    match warns.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, ParetoQConfig):
        raise TypeError(f"config must be a ParetoQConfig, got {type(config).__name__}")
    if any(isinstance(m, PackedLinear | PackedConv2d) for m in model.modules()):
        raise TypeError(
            "the model holds PackedLinear/PackedConv2d modules: it is already converted to low-bit "
            "weights"
        )
    kinds: tuple[type, ...] = (nn.Linear, nn.Conv2d) if config.conv2d else (nn.Linear,)
    targets = []
    for fqn, mod in model.named_modules():
        if type(mod) not in kinds or _excluded(fqn, config.exclude):
            continue
        if filter_fn is not None and not filter_fn(mod, fqn):
            continue
        if not mod.weight.is_floating_point():
            raise TypeError(f"{fqn}: cannot quantize integer weights (dtype {mod.weight.dtype})")
        if config.check_finite and not bool(torch.isfinite(mod.weight).all()):
            raise ValueError(
                f"{fqn}: weight holds NaN or inf; ParetoQ cannot quantize it "
                "(ParetoQConfig(check_finite=False) to skip this check)"
            )
        targets.append(fqn)
    if not targets:
        if not any(isinstance(m, QATLinear | QATConv2d) for m in model.modules()):
            what = "nn.Linear or nn.Conv2d" if config.conv2d else "nn.Linear"
            warnings.warn(
                f"quantize_: no {what} matched; the model is unchanged", UserWarning, stacklevel=2
            )
        return model
    opts = dict(
        quantizer=config.quantizer, granularity=config.granularity,
        learnable_scale=config.learnable_scale, check_finite=config.check_finite,
    )  # fmt: skip
    for fqn in targets:
        mod = model.get_submodule(fqn)
        new = (
            QATConv2d.from_conv(mod, config.bits, **opts)  # type: ignore[arg-type]
            if isinstance(mod, nn.Conv2d)
            else QATLinear.from_linear(mod, config.bits, **opts)  # type: ignore[arg-type]
        )
        _set_child(model, fqn, new)
    return model


def convert_(model: nn.Module, packed: bool = True, backend: str = "auto") -> nn.Module:
    """QAT → inference, in place: every QATLinear becomes a :class:`PackedLinear` (``packed=True``) or
    a plain ``nn.Linear`` holding the fake-quantized weight; every QATConv2d likewise a
    :class:`PackedConv2d` or a plain ``nn.Conv2d``. Returns the model.

    Raises ``ValueError`` when the model holds no QAT module (never quantized, or already
    converted) and when a quantized weight is not finite (naming the module).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    qat = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, QATLinear | QATConv2d)]
    if not qat:
        state = (
            "already converted (it holds PackedLinear/PackedConv2d modules)"
            if any(isinstance(m, PackedLinear | PackedConv2d) for m in model.modules())
            else "never quantized: call quantize_(model, ParetoQConfig(...)) and train it first"
        )
        raise ValueError(f"convert_: the model holds no QATLinear or QATConv2d; it was {state}")
    for fqn, mod in qat:
        with torch.no_grad():
            finite = torch.isfinite(mod.weight).all() & torch.isfinite(mod.quantized_weight()).all()
            if not bool(finite):
                raise ValueError(
                    f"convert_: {fqn} has a non-finite weight or quantized weight (NaN/inf weight "
                    "or scale: training diverged)"
                )
    for fqn, mod in qat:
        if isinstance(mod, QATConv2d):
            new: nn.Module = _convert_conv(mod, packed, backend)
        elif packed:
            new = PackedLinear(mod, backend=backend)
        else:
            new = nn.Linear(
                mod.in_features,
                mod.out_features,
                mod.bias is not None,
                device=mod.weight.device,
                dtype=mod.weight.dtype,
            )
            with torch.no_grad():
                new.weight.copy_(mod.quantized_weight())
                if mod.bias is not None:
                    new.bias.copy_(mod.bias)
        _set_child(model, fqn, new)
    return model


def _convert_conv(mod: QATConv2d, packed: bool, backend: str) -> nn.Module:
    if packed:
        return PackedConv2d(mod, backend=backend)
    new = nn.Conv2d(
        mod.in_channels, mod.out_channels, mod.kernel_size, mod.stride, mod.padding, mod.dilation,
        mod.groups, mod.bias is not None, mod.padding_mode, device=mod.weight.device,
        dtype=mod.weight.dtype,
    )  # fmt: skip
    with torch.no_grad():
        new.weight.copy_(mod.quantized_weight())
        if mod.bias is not None:
            new.bias.copy_(mod.bias)
    return new

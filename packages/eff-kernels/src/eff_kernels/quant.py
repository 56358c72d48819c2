"""Quantization primitives shared by SageAttention, LRQK and ParetoQ (pure PyTorch, any device).

Formats, all emulated in float32 so that every device computes the same numbers:

- **INT8 per block / per row group** (SageAttention's Triton quantizer, ``quant_per_block.py``):
  scale = max|x|/127 over the group, ``x_int8 = trunc(x/scale + 0.5·sign(x))`` (round half away
  from zero). Groups are blocks of tokens (``per_block``), warps of 32 query rows (``per_warp``) or
  the MMA-fragment row sets of ``per_thread`` (:func:`row_groups`).
- **FP8 E4M3 per channel** (SageAttention2's V): scale = max_tokens|V|/448 (``/2.25`` for the
  SageAttention2++ fp16 accumulator), round to nearest even, saturate at ±448.
- **NVFP4**: 1×16 blocks, scale ``sf = E4M3(max|x|/6)``, elements ``E2M1(x·(1/sf))`` with the
  E2M1 grid {0, .5, 1, 1.5, 2, 3, 4, 6}, round to nearest, ties to even, saturate at 6 (the
  ``cvt.rn.satfinite.e2m1x2`` of ``fp4_quantization_4d.cu``). Two codes per byte, low nibble first.
- **MXFP4** (OCP MX): 1×32 blocks, power-of-two E8M0 scale ``2^(floor(log2 max|x|) − 2)``,
  elements E2M1 (values that exceed 6 after scaling saturate).
"""

from __future__ import annotations

import math

import torch

from eff_shared.errors import check_choice

__all__ = [
    "E2M1_VALUES",
    "e2m1_decode",
    "e2m1_encode",
    "e2m1_round",
    "e4m3_round",
    "fake_fp4",
    "floor_log2",
    "fp8_e4m3_per_channel",
    "int8_per_block",
    "int8_quantize_rows",
    "mxfp4_dequantize",
    "mxfp4_quantize",
    "nvfp4_dequantize",
    "nvfp4_quantize",
    "pack_nibbles",
    "round_half_away",
    "row_groups",
    "unpack_nibbles",
]

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E4M3_MAX = 448.0
FP4_MAX = 6.0
GRANULARITIES = ("per_block", "per_warp", "per_thread")


def round_half_away(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, halves away from zero (SageAttention's ``+0.5·sign`` then truncate)."""
    return torch.trunc(x + 0.5 * torch.sign(x))


# ---------------------------------------------------------------------------------------------
# INT8


def row_groups(
    n: int, kind: str, granularity: str, device: torch.device | None = None
) -> tuple[torch.Tensor, int]:
    """Group index of each of ``n`` rows and the number of groups, for Q (``kind="q"``) or K.

    ``per_block``: Q blocks of 128 rows, K blocks of 64. ``per_warp``: Q blocks of 32 rows (WARPQ),
    K blocks of 64. ``per_thread``: inside each 128-row Q block the rows i ≡ t (mod 8) share a scale
    (8 groups per block); inside each 64-row K block the rows 2t, 2t+1 (mod 8) share one (4 groups).
    """
    check_choice("qk_granularity", granularity, GRANULARITIES)
    check_choice("kind", kind, ("q", "k"))
    rows = torch.arange(n, device=device)
    if granularity == "per_block" or (granularity == "per_warp" and kind == "k"):
        block = 128 if kind == "q" else 64
        groups = rows // block
        return groups, max(1, math.ceil(n / block))
    if granularity == "per_warp":
        return rows // 32, max(1, math.ceil(n / 32))
    if kind == "q":
        groups = (rows // 128) * 8 + rows % 8
        return groups, max(1, math.ceil(n / 128)) * 8
    groups = (rows // 64) * 4 + (rows % 8) // 2
    return groups, max(1, math.ceil(n / 64)) * 4


def int8_quantize_rows(
    x: torch.Tensor, groups: torch.Tensor, n_groups: int, sm_scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """INT8-quantize ``x`` (..., L, D) with one scale per row group; returns (int8, per-row scale).

    ``x`` is first multiplied by ``sm_scale`` in float32 (SageAttention folds s·log2e into Q here).
    The per-row scale (..., L) repeats its group's scale so kernels can load it per row.
    """
    xf = x.float() * sm_scale
    rowmax = xf.abs().amax(dim=-1)  # (..., L)
    shape = (*rowmax.shape[:-1], n_groups)
    gmax = torch.zeros(shape, dtype=torch.float32, device=x.device)
    gmax = gmax.scatter_reduce(-1, groups.expand_as(rowmax), rowmax, reduce="amax")
    scale = gmax / 127.0
    row_scale = scale.gather(-1, groups.expand_as(rowmax))
    safe = torch.where(row_scale > 0, row_scale, torch.ones_like(row_scale))
    q = round_half_away(xf / safe.unsqueeze(-1)).clamp(-127, 127).to(torch.int8)
    return q, row_scale


def int8_per_block(
    x: torch.Tensor, block: int, sm_scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """INT8 per block of ``block`` tokens of ``x`` (..., L, D): returns (int8 tensor, scales (..., ⌈L/block⌉)).

    scale = max|x·sm_scale|/127 over the block (all rows and channels), round half away from zero.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    n = x.shape[-2]
    groups = torch.arange(n, device=x.device) // block
    n_groups = max(1, math.ceil(n / block))
    q, row_scale = int8_quantize_rows(x, groups, n_groups, sm_scale)
    return q, row_scale[..., ::block].contiguous() if n else row_scale[..., :0]


# ---------------------------------------------------------------------------------------------
# FP8


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    """Round float32 values to FP8 E4M3 (nearest even, subnormals kept, saturate at ±448), as float32."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) for x > 0, exactly (from the float exponent); -127 where x == 0."""
    _, e = torch.frexp(x.float())
    return torch.where(x > 0, (e - 1).float(), torch.full_like(x, -127.0, dtype=torch.float32))


def fp8_e4m3_per_channel(
    x: torch.Tensor, max_value: float = E4M3_MAX
) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 E4M3 per channel over tokens of ``x`` (..., L, D): returns (float8_e4m3fn tensor, scale (..., 1, D)).

    scale = max_tokens|x|/max_value (448; SageAttention2++ uses 2.25 so an fp16 PV accumulator cannot
    overflow).
    """
    if not 0 < max_value <= E4M3_MAX:
        raise ValueError(f"max_value must lie in (0, 448], got {max_value}")
    xf = x.float()
    scale = xf.abs().amax(dim=-2, keepdim=True) / max_value
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = (xf / safe).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale


# ---------------------------------------------------------------------------------------------
# FP4 (E2M1) elements, nibble packing, NVFP4 and MXFP4


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, bit 3 = sign, bits 0-2 = index into :data:`E2M1_VALUES`) of float values.

    Round to nearest, ties to even (even = index with mantissa bit 0), saturate at 6: the comparisons
    below put each tie on the even side (strict ``>`` where the lower neighbour is even).
    """
    a = x.float().abs()
    mag = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    )
    return mag | (torch.signbit(x.float()).to(torch.uint8) << 3)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Float32 values of E2M1 codes."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    mag = table[(codes & 7).long()]
    return torch.where((codes & 8) > 0, -mag, mag)


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Round float values to the E2M1 grid (nearest, ties to even, saturate at ±6), as float32."""
    return e2m1_decode(e2m1_encode(x))


def pack_nibbles(codes: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Pack 4-bit codes two per byte along ``dim`` (even length), low nibble first."""
    c = codes.movedim(dim, -1)
    if c.shape[-1] % 2:
        raise ValueError(f"the packed dimension must have even length, got {c.shape[-1]}")
    c = c.to(torch.uint8)
    packed = (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)
    return packed.movedim(-1, dim).contiguous()


def unpack_nibbles(packed: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Inverse of :func:`pack_nibbles`."""
    p = packed.movedim(dim, -1)
    out = torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)
    return out.movedim(-1, dim).contiguous()


def _blocks(x: torch.Tensor, dim: int, block: int, name: str) -> torch.Tensor:
    xm = x.float().movedim(dim, -1)
    if xm.shape[-1] % block:
        raise ValueError(
            f"{name}: the quantized dimension must be a multiple of {block}, got {xm.shape[-1]}"
        )
    return xm.reshape(*xm.shape[:-1], xm.shape[-1] // block, block)


def nvfp4_quantize(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 along ``dim``: returns (packed uint8 codes, float8_e4m3fn scale per 16 elements).

    Per 1×16 block: ``sf = E4M3(max|x|/6)``, elements ``E2M1(x·(1/sf))`` (no per-tensor second
    scale, as SageAttention3 quantizes Q, K and V).
    """
    xb = _blocks(x, dim, 16, "nvfp4_quantize")
    sf = e4m3_round(xb.abs().amax(dim=-1, keepdim=True) / FP4_MAX)
    inv = torch.where(sf > 0, 1.0 / sf, torch.zeros_like(sf))
    codes = e2m1_encode(xb * inv).flatten(-2)
    packed = pack_nibbles(codes, -1).movedim(-1, dim)
    scales = sf.squeeze(-1).to(torch.float8_e4m3fn).movedim(-1, dim)
    return packed.contiguous(), scales.contiguous()


def nvfp4_dequantize(
    packed: torch.Tensor, scales: torch.Tensor, dim: int = -1, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Values of NVFP4 ``packed`` codes with their E4M3 block scales."""
    codes = unpack_nibbles(packed.movedim(dim, -1), -1)
    vals = e2m1_decode(codes)
    vals = vals.reshape(*vals.shape[:-1], -1, 16) * scales.movedim(dim, -1).float().unsqueeze(-1)
    return vals.flatten(-2).movedim(-1, dim).to(dtype)


def mxfp4_quantize(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4 along ``dim``: returns (packed uint8 codes, uint8 E8M0 biased exponents per 32 elements).

    Shared scale ``2^(floor(log2 max|x|) − 2)`` (OCP MX v1.0 with emax(E2M1) = 2); an all-zero block
    gets the smallest scale 2^-127.
    """
    xb = _blocks(x, dim, 32, "mxfp4_quantize")
    amax = xb.abs().amax(dim=-1, keepdim=True)
    exp = (floor_log2(amax) - 2).clamp(-127, 127)
    codes = e2m1_encode(xb * torch.exp2(-exp)).flatten(-2)
    packed = pack_nibbles(codes, -1).movedim(-1, dim)
    biased = (exp.squeeze(-1) + 127).to(torch.uint8).movedim(-1, dim)
    return packed.contiguous(), biased.contiguous()


def mxfp4_dequantize(
    packed: torch.Tensor, exponents: torch.Tensor, dim: int = -1, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Values of MXFP4 ``packed`` codes with their E8M0 exponents."""
    codes = unpack_nibbles(packed.movedim(dim, -1), -1)
    vals = e2m1_decode(codes)
    scale = torch.exp2(exponents.movedim(dim, -1).float() - 127).unsqueeze(-1)
    vals = vals.reshape(*vals.shape[:-1], -1, 32) * scale
    return vals.flatten(-2).movedim(-1, dim).to(dtype)


def fake_fp4(x: torch.Tensor, fmt: str = "nvfp4", dim: int = -1) -> torch.Tensor:
    """Quantize-dequantize ``x`` to NVFP4 or MXFP4 along ``dim`` (float32 result)."""
    check_choice("fmt", fmt, ("nvfp4", "mxfp4"))
    if fmt == "nvfp4":
        return nvfp4_dequantize(*nvfp4_quantize(x, dim), dim=dim)
    return mxfp4_dequantize(*mxfp4_quantize(x, dim), dim=dim)

"""Fine-tuning-resistant DNN fingerprinting in frequency components of convolution filters.

Paper: L. Tang, Y. Chen, H. Xue, Q. Zhang, "Towards the Resistance of Neural Network Fingerprinting
to Fine-tuning", NeurIPS 2025 (arXiv 2505.01007). **Our construction:** the paper's code and its exact
"revised Fourier transform" formula were not available; what follows is a construction derived for
this package (spec "Conv-filter frequency fingerprinting") that provably has the claimed properties.

A conv with **circular padding** computes Y = W ⋆ X; in the DFT of the feature-map size M×N,
Ŷ(u,v) = e^{−i2π(up/M + vp/N)}·F_W(u,v)·X̂(u,v) with the *revised Fourier transform of the filter*

    F_W(u,v) = Σ_{m,n<K} W[m,n]·e^{+i2π(um/M + vn/N)}          (:func:`revised_fourier`)

(the DFT of the zero-padded K×K filter at the feature-map size, with the + sign). The gradient
∂L/∂W[m,n] = Σ_ij G[i,j]·X[i+m−p, j+n−p] is a correlation with the input; if X contains only the
frequencies 𝓛 = {|u|, |v| ≤ U₀}, every gradient lies in

    S_𝓛 = span{cos, sin of 2π(um/M + vn/N) on the K×K support, (u,v) ∈ 𝓛}.

Hence the coordinates z = Bᵀ vec(W[o,i]), B an orthonormal basis of S_𝓛^⊥ (:func:`invariant_basis`:
SVD of the stacked sinusoids; singular values > 1e-9·s_max count as rank), are **exactly unchanged by
any gradient-descent update** (SGD, momentum; weight decay only rescales them all by one factor),
**scaled** by weight scaling and **permuted** by channel permutations. For K = 5, M = 8, U₀ = 1, 16 of
the 25 dimensions of each filter slice are invariant; K = 3 with U₀ = 1 has none.

:class:`FingerprintModule`: h ← h + Conv_fp(P(h)), P an ideal FFT low-pass (|u|, |v| ≤ U₀), Conv_fp a
K×K circular conv without bias. :func:`embed`: the owner's key (a seed) picks n slots among the
O·I·dim(S^⊥) coordinates; z_slot = b·τ with τ = strength·mean|W|; W ← W − B(BᵀW) + Bz.
:func:`extract`/:func:`verify`: recover a channel permutation by Hungarian matching on
input-permutation-invariant descriptors (per output channel, the invariant coordinates sorted over
input channels, L2-normalised, cosine similarity), align, and read the signs (scale-free).

Limits (documented, tested): the guarantee needs the circular padding above. With zero (or reflect,
replicate) padding the border patches of band-limited inputs span every K×K filter (rank K² for
K = 5 and 7 at M = 8, U₀ = 1: no coordinate is exactly invariant), so ``padding_mode="zeros"``
keeps the circular basis and the fingerprint is only approximately preserved. The guarantee is for (S)GD. **Adam** normalises per coordinate, leaves
S_𝓛 and breaks exact invariance (the fingerprint still degrades less than a naive weight watermark).
LoRA-style fine-tuning of the fingerprint layer also leaves S_𝓛 in general (the update B·A carries
A's random initial directions). The invariant coordinates lie in the null space of the layer for
band-limited inputs, so embedding costs no accuracy — and an attacker who knows this construction
could overwrite them without changing the function (outside the paper's threat model).

Baseline: :class:`UchidaWatermark` (Uchida et al. 2017), signs of key-dependent random projections of
a layer's weights embedded by a BCE regulariser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_int
from eff_shared.seeding import make_rng

__all__ = [
    "PADDING_MODES",
    "FingerprintModule",
    "FingerprintRecord",
    "UchidaWatermark",
    "VerifyResult",
    "embed",
    "extract",
    "invariant_basis",
    "invariant_coords",
    "low_pass_mask",
    "revised_fourier",
    "verify",
]


PADDING_MODES = ("circular", "zeros", "reflect", "replicate")


def revised_fourier(weight: Tensor, size: tuple[int, int]) -> Tensor:
    """F_W(u,v) = Σ_{m,n<K} W[..., m, n]·exp(+i2π(um/M + vn/N)) for every (u, v) of an M×N grid.

    ``weight`` [..., K_h, K_w] real → complex [..., M, N] (computed with explicit DFT matrices; it
    equals ``conj(torch.fft.fft2(zero-padded W))`` for real W)."""
    m_, n_ = int(size[0]), int(size[1])
    kh, kw = weight.shape[-2:]
    if kh > m_ or kw > n_:
        raise ValueError(f"size {size} must be at least the kernel size {(kh, kw)}")
    cdt = torch.complex128 if weight.dtype == torch.float64 else torch.complex64
    rdt = torch.float64 if cdt == torch.complex128 else torch.float32
    u = torch.arange(m_, dtype=rdt, device=weight.device)
    v = torch.arange(n_, dtype=rdt, device=weight.device)
    em = torch.exp(
        2j * math.pi * torch.outer(u, torch.arange(kh, dtype=rdt, device=weight.device)) / m_
    )
    en = torch.exp(
        2j * math.pi * torch.outer(v, torch.arange(kw, dtype=rdt, device=weight.device)) / n_
    )
    return torch.einsum("um,...mn,vn->...uv", em.to(cdt), weight.to(cdt), en.to(cdt))


def _band(feature_size: tuple[int, int], band: int) -> list[tuple[int, int]]:
    m_, n_ = feature_size
    us = sorted({u % m_ for u in range(-band, band + 1)})
    vs = sorted({v % n_ for v in range(-band, band + 1)})
    return [(u, v) for u in us for v in vs]


def low_pass_mask(feature_size: tuple[int, int], band: int) -> Tensor:
    """Boolean M×N mask of the DFT bins with |u|, |v| ≤ band (wrapped frequencies)."""
    mask = torch.zeros(feature_size, dtype=torch.bool)
    for u, v in _band(feature_size, band):
        mask[u, v] = True
    return mask


def invariant_basis(kernel_size: int, feature_size: tuple[int, int], band: int) -> Tensor:
    """Orthonormal basis B [K², d] (float64) of S_𝓛^⊥: the K×K filters orthogonal to every cos/sin
    of 2π(um/M + vn/N), |u|, |v| ≤ band. d = K² − rank(S_𝓛) (may be 0)."""
    _check_geometry(kernel_size, feature_size, band)
    k = kernel_size
    m_, n_ = feature_size
    mm, nn_ = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    cols = []
    for u in range(-band, band + 1):
        for v in range(-band, band + 1):
            phase = 2 * np.pi * (u * mm / m_ + v * nn_ / n_)
            cols += [np.cos(phase).ravel(), np.sin(phase).ravel()]
    s_mat = np.stack(cols, axis=1)  # [K², 2(2U₀+1)²]
    u_, s, _ = np.linalg.svd(s_mat, full_matrices=True)
    rank = int((s > 1e-9 * s.max()).sum())
    return torch.from_numpy(np.ascontiguousarray(u_[:, rank:]))


def _check_geometry(kernel_size: int, feature_size: tuple[int, int], band: int) -> None:
    check_int("kernel_size", kernel_size, minimum=1)
    if len(tuple(feature_size)) != 2 or min(feature_size) < kernel_size:
        raise ValueError(
            f"feature_size must be (M, N) with M, N >= kernel_size={kernel_size}, got {feature_size!r}"
        )
    check_int("band", band, minimum=0)


class FingerprintModule(nn.Module):
    """h ← h + Conv_fp(P(h)): P an ideal FFT low-pass (|u|, |v| ≤ band) at ``feature_size``, Conv_fp a
    ``kernel_size``² same-size convolution without bias (our construction; see the module docstring).

    ``padding_mode`` (one of :data:`PADDING_MODES`, default ``"circular"``) is the conv's padding of
    K // 2 pixels per side: only ``"circular"`` makes the invariant coordinates exactly invariant
    under (S)GD; the others keep the same basis, and the fingerprint then survives only
    approximately (no K×K coordinate is invariant under zero padding).

    ``ValueError`` when the basis has no invariant dimension (e.g. K = 3, band 1), or at run time
    when the input's spatial size differs from ``feature_size`` (the invariance is size-specific)."""

    def __init__(
        self,
        channels: int,
        kernel_size: int = 5,
        feature_size: tuple[int, int] = (8, 8),
        band: int = 1,
        padding_mode: str = "circular",
    ) -> None:
        super().__init__()
        check_choice("padding_mode", padding_mode, PADDING_MODES)
        feature_size = (int(feature_size[0]), int(feature_size[1]))
        basis = invariant_basis(kernel_size, feature_size, band)
        if basis.shape[1] == 0:
            raise ValueError(
                f"band={band} is too wide for kernel_size={kernel_size} at feature_size="
                f"{feature_size}: dim S^⊥ = 0, there is no invariant coordinate to carry bits"
            )
        if kernel_size % 2 == 0:
            raise ValueError(
                f"kernel_size must be odd (same-size circular conv), got {kernel_size}"
            )
        self.channels, self.kernel_size = channels, kernel_size
        self.feature_size, self.band, self.padding_mode = feature_size, band, padding_mode
        self.conv = nn.Conv2d(
            channels, channels, kernel_size, padding=kernel_size // 2, padding_mode=padding_mode,
            bias=False,
        )  # fmt: skip
        # float64 on purpose and not a buffer: Module.float() would round it to float32, and a
        # rounded basis leaks 1e-7 of every gradient into the "invariant" coordinates.
        self._basis = basis
        self.register_buffer("mask", low_pass_mask(feature_size, band), persistent=False)

    @property
    def basis(self) -> Tensor:
        """The orthonormal basis B [K², d] of S_𝓛^⊥ (float64, CPU)."""
        return self._basis

    @property
    def invariant_dim(self) -> int:
        return int(self.basis.shape[1])

    @property
    def capacity(self) -> int:
        """O·I·dim(S^⊥) invariant coordinates (= the largest number of bits)."""
        return self.channels * self.channels * self.invariant_dim

    def low_pass(self, h: Tensor) -> Tensor:
        spec = torch.fft.fft2(h)
        return torch.fft.ifft2(spec * self.mask.to(h.device)).real.to(h.dtype)

    def forward(self, h: Tensor) -> Tensor:
        if tuple(h.shape[-2:]) != self.feature_size:
            raise ValueError(
                f"FingerprintModule was built for feature size {self.feature_size}, got input "
                f"{tuple(h.shape[-2:])}; the invariance holds only at the size of the basis"
            )
        _check_padding(self)
        return h + self.conv(self.low_pass(h))


def _check_padding(module: FingerprintModule) -> None:
    # .conv's padding changed after construction would silently void (or change) the guarantee
    if module.conv.padding_mode != module.padding_mode:
        raise ValueError(
            f"the fingerprint conv's padding_mode is {module.conv.padding_mode!r} but the module "
            f"was built with padding_mode={module.padding_mode!r}; choose it when constructing "
            "FingerprintModule(padding_mode=...) (only 'circular' keeps the invariance exact)"
        )


def invariant_coords(module: FingerprintModule) -> Tensor:
    """z [O, I, d] = Bᵀ vec(W[o, i]) of the module's filters (float64)."""
    _check_padding(module)
    w = module.conv.weight.detach().to(torch.float64)
    o, i = w.shape[:2]
    return torch.einsum(
        "oik,kd->oid", w.reshape(o, i, -1), module.basis.to(w.device, torch.float64)
    )


@dataclass
class FingerprintRecord:
    """What the owner keeps: the key, the chosen slots (flat indices into z), the ±1 bits, the
    reference invariant coordinates z right after embedding, and the geometry of the basis."""

    key: int
    slots: Tensor
    bits: Tensor
    reference: Tensor
    feature_size: tuple[int, int]
    band: int
    kernel_size: int = 5


@dataclass
class VerifyResult:
    ber: float
    permutation: Tensor
    scale: float
    passed: bool


def _pm1(bits: Tensor) -> Tensor:
    bits = torch.as_tensor(bits)
    if bits.ndim != 1 or bits.numel() == 0:
        raise ValueError(f"bits must be a non-empty 1-D tensor, got shape {tuple(bits.shape)}")
    vals = set(torch.unique(bits).tolist())
    if vals <= {0, 1}:
        return bits.to(torch.float64) * 2 - 1
    if vals <= {-1, 1}:
        return bits.to(torch.float64)
    raise ValueError(f"bits must take values in {{0, 1}} or {{-1, +1}}, got {sorted(vals)}")


def _slots(key: int, capacity: int, n: int) -> Tensor:
    return torch.from_numpy(make_rng(key, 51).choice(capacity, size=n, replace=False)).long()


def embed(
    module: FingerprintModule, bits: Tensor, key: int, strength: float = 2.0
) -> FingerprintRecord:
    """Write ``bits`` ({0,1} or ±1) into the invariant coordinates chosen by ``key``:
    z_slot = b·τ, τ = strength·mean|W|; W ← W − B(BᵀW) + B z (in place). Returns the record."""
    _check_padding(module)
    b = _pm1(bits)
    if b.numel() > module.capacity:
        raise ValueError(
            f"{b.numel()} bits exceed the module's capacity O·I·dim(S^⊥) = {module.capacity}"
        )
    if not strength > 0:
        raise ValueError(f"strength must be > 0, got {strength!r}")
    with torch.no_grad():
        w = module.conv.weight
        basis = module.basis.to(w.device, torch.float64)
        o, i = w.shape[:2]
        flat = w.detach().to(torch.float64).reshape(o, i, -1)
        z = torch.einsum("oik,kd->oid", flat, basis)
        tau = strength * float(flat.abs().mean())
        slots = _slots(key, module.capacity, b.numel())
        z_flat = z.reshape(-1).clone()
        z_flat[slots] = b * tau
        z_new = z_flat.reshape(z.shape)
        flat = (
            flat - torch.einsum("oid,kd->oik", z, basis) + torch.einsum("oid,kd->oik", z_new, basis)
        )
        w.copy_(flat.reshape(w.shape).to(w.dtype))
    return FingerprintRecord(
        key=int(key), slots=slots, bits=b, reference=invariant_coords(module).clone(),
        feature_size=module.feature_size, band=module.band, kernel_size=module.kernel_size,
    )  # fmt: skip


def _check_record(module: FingerprintModule, record: FingerprintRecord) -> None:
    if not isinstance(record, FingerprintRecord):
        raise TypeError(f"record must be a FingerprintRecord, got {type(record).__name__}")
    expect = (module.channels, module.channels, module.invariant_dim)
    if (
        tuple(record.reference.shape) != expect
        or tuple(record.feature_size) != module.feature_size
        or record.band != module.band
        or record.kernel_size != module.kernel_size
        or record.slots.shape != record.bits.shape
    ):
        raise ValueError(
            f"record does not match the module: reference {tuple(record.reference.shape)} vs "
            f"{expect}, feature size {record.feature_size} vs {module.feature_size}, band "
            f"{record.band} vs {module.band}, kernel {record.kernel_size} vs {module.kernel_size}"
        )


def _descriptors(z: Tensor) -> Tensor:
    d = torch.sort(z, dim=1).values.reshape(z.shape[0], -1)  # sorted over input channels
    return d / torch.clamp(d.norm(dim=1, keepdim=True), min=1e-300)


def recover_permutation(z: Tensor, reference: Tensor) -> Tensor:
    """perm with z[o] ≈ reference[perm[o]] (Hungarian matching on cosine similarity of the
    input-permutation-invariant descriptors; a positive global scale does not change them)."""
    from scipy.optimize import linear_sum_assignment

    sim = _descriptors(z) @ _descriptors(reference).T
    rows, cols = linear_sum_assignment(-sim.numpy())
    perm = torch.empty(len(rows), dtype=torch.long)
    perm[torch.from_numpy(rows)] = torch.from_numpy(cols).long()
    return perm


def _aligned(
    module: FingerprintModule, record: FingerprintRecord, align: bool
) -> tuple[Tensor, Tensor]:
    z = invariant_coords(module)
    perm = torch.arange(z.shape[0])
    if align:
        perm = recover_permutation(z, record.reference)
        # the same permutation acts on inputs and outputs (the block is C → C with a residual)
        aligned = torch.empty_like(z)
        aligned[perm[:, None], perm[None, :]] = z
        z = aligned
    return z, perm


def extract(module: FingerprintModule, record: FingerprintRecord, align: bool = True) -> Tensor:
    """The ±1 bits read from the module's invariant coordinates (after permutation alignment)."""
    _check_record(module, record)
    z, _ = _aligned(module, record, align)
    return torch.sign(z.reshape(-1)[record.slots])


def verify(
    module: FingerprintModule, record: FingerprintRecord, max_ber: float = 0.05, align: bool = True
) -> VerifyResult:
    """BER of the extracted bits, the recovered permutation, the scale ⟨z, z₀⟩/⟨z₀, z₀⟩ and
    whether BER ≤ ``max_ber``."""
    _check_record(module, record)
    z, perm = _aligned(module, record, align)
    bits = torch.sign(z.reshape(-1)[record.slots])
    ber = float((bits != record.bits).to(torch.float64).mean())
    ref = record.reference
    scale = float((z * ref).sum() / (ref * ref).sum())
    return VerifyResult(ber=ber, permutation=perm, scale=scale, passed=ber <= max_ber)


class UchidaWatermark:
    """Naive weight-space watermark (Uchida et al., ICMR 2017), the baseline: bits = signs of
    key-dependent random projections of ``layer``'s flattened weights, embedded during training by
    ``weight``·BCE(sigmoid(scale·X w), bits)."""

    def __init__(
        self, layer: str, n_bits: int, key: int, weight: float = 0.05, scale: float = 10.0
    ) -> None:
        check_int("n_bits", n_bits, minimum=1)
        self.layer, self.n_bits, self.key, self.weight, self.scale = (
            layer,
            n_bits,
            key,
            weight,
            scale,
        )
        rng = make_rng(key, 52)
        self.bits = torch.from_numpy(rng.integers(0, 2, n_bits)).to(torch.float32)
        self._proj: Tensor | None = None

    def _projection(self, w: Tensor) -> Tensor:
        if self._proj is None or self._proj.shape[1] != w.numel():
            rng = make_rng(self.key, 53)
            proj = rng.standard_normal((self.n_bits, w.numel())) / math.sqrt(w.numel())
            self._proj = torch.from_numpy(proj).to(torch.float32)
        return self._proj.to(w.device, w.dtype)

    def _weight(self, model: nn.Module) -> Tensor:
        return model.get_submodule(self.layer).weight.reshape(-1)

    def regularizer(self, model: nn.Module) -> Tensor:
        w = self._weight(model)
        logits = self.scale * (self._projection(w) @ w)
        return self.weight * F.binary_cross_entropy_with_logits(logits, self.bits.to(w.device))

    @torch.no_grad()
    def extract(self, model: nn.Module) -> Tensor:
        w = self._weight(model)
        return (self._projection(w) @ w > 0).to(torch.float32)

    def ber(self, model: nn.Module) -> float:
        return float((self.extract(model) != self.bits).to(torch.float64).mean())

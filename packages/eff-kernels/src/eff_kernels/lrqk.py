"""LRQK: low-rank query/key attention with a hit/miss GPU–CPU KV cache.

Paper: arXiv 2510.23649 (NeurIPS 2025); code ``tenghuilee/LRQK`` @ f3b843f (``lrqk_attention.py``:
``_lrqk_prefill_inv_w1``, ``_lrqk_decode_inv_w1``, ``LightAttentionIndicesFactory``).

Per layer and query head (keys repeated to the query heads for GQA):

- **Prefill** — alternating least squares (not an SVD) from a random start, minimising
  ‖QKᵀ − A_Q A_Kᵀ‖² + λ_Q‖Q − A_Q B_Q‖² + λ_K‖K − A_K B_K‖² (poster eq. 1), each iteration
  B = (AᵀA)⁻¹AᵀX, A_Q = Q(KᵀA_K + λ_Q B_Qᵀ)(A_KᵀA_K + λ_Q B_QB_Qᵀ)⁻¹, then
  A_K = K(QᵀA_Q + λ_K B_Kᵀ)(A_QᵀA_Q + λ_K B_KB_Kᵀ)⁻¹ with the new A_Q; 2 iterations, tol 1e-2 on
  the mean squared change of A; B recomputed at the end. Stored: A_K (l×r), B_Q, B_K (r×d).
  Prefill attention itself is ordinary full attention.
- **Decode** (eq. 2–3) — 1×r projections q̂, k̂ from 2 alternations of
  q̂ = (qB_Qᵀ + (qK_Ωᵀ)A_{K,Ω} + (qkᵀ)k̂)(B_QB_Qᵀ + A_{K,Ω}ᵀA_{K,Ω} + k̂ᵀk̂)⁻¹ and
  k̂ = (kB_Kᵀ + (qkᵀ)q̂)(B_KB_Kᵀ + q̂ᵀq̂)⁻¹, then one gradient step on B_Q and B_K with exact line
  search; k̂ is appended to A_K. **Proxy scores** A_K q̂ᵀ cost O(l·r); the top-k of the tokens
  outside the recent window are selected, the window always stays.
- **Hit/miss cache** — the full-precision K/V live on the offload device; only the selected rows
  that are not resident yet are copied into the freed device slots (:class:`HitMissKVStore`).
  Attention is then **exact over the k + w resident tokens** (exact over the subset, not exact full
  attention — equal to it when the selection covers every token).

transformers integration (:func:`enable_lrqk`): in transformers 5 ``LlamaAttention`` calls
``cache.update(k, v, layer_idx)`` and then the attention function; the cache never sees the query,
so the LRQK logic lives in the registered attention function ``"lrqk"`` and the cache layer only
stores K/V on the offload device.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from eff_shared.errors import check_choice, check_int

__all__ = [
    "HitMissKVStore",
    "LRQKConfig",
    "LRQKState",
    "LowRankQK",
    "als_objective",
    "enable_lrqk",
    "lrqk_decode_update",
    "lrqk_prefill",
    "proxy_topk",
    "sparse_decode_attention",
]

INITS = ("randn", "top", "topcol")


@dataclass(frozen=True)
class LRQKConfig:
    """LRQK hyper-parameters; defaults are the poster's recommendation (r = 32, k = 2048, w = 64)."""

    rank: int = 32
    top_k: int = 2048
    window: int = 64
    iters: tuple[int, int] = (2, 2)  # ALS iterations in prefill, alternations in decode
    tol: float = 1e-2
    init: str = "randn"
    lambdas: tuple[float, float, float, float] = (
        1.0,
        1.0,
        1.0,
        1.0,
    )  # λ_Q, λ_K (prefill), λ1, λ2 (decode)
    offload_device: str = "cpu"
    pin_memory: bool = True
    seed: int | None = 0
    backend: str = "auto"  # sparse attention: "auto" | "reference" | "triton"

    def __post_init__(self) -> None:
        for name in ("rank", "top_k"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("window", self.window, minimum=0)
        if len(self.iters) != 2 or any(int(i) < 1 for i in self.iters):
            raise ValueError(f"iters must be two integers >= 1, got {self.iters!r}")
        if not self.tol >= 0:
            raise ValueError(f"tol must be >= 0, got {self.tol!r}")
        check_choice("init", self.init, INITS)
        if len(self.lambdas) != 4 or any(lam < 0 for lam in self.lambdas):
            raise ValueError(f"lambdas must be four numbers >= 0, got {self.lambdas!r}")
        check_choice("backend", self.backend, ("auto", "reference", "triton"))


class LowRankQK(NamedTuple):
    """The factors of one prefill: A_Q (…, l, r), B_Q (…, r, d), A_K (…, l, r), B_K (…, r, d)."""

    a_q: torch.Tensor
    b_q: torch.Tensor
    a_k: torch.Tensor
    b_k: torch.Tensor


# ---------------------------------------------------------------------------------------------
# linear algebra with a guard against singular systems


def _solve(a: torch.Tensor, b: torch.Tensor, left: bool = True) -> torch.Tensor:
    """Solve a·x = b (left) or x·a = b; adds ε·I, then falls back to least squares, never returns NaN silently."""
    x, info = torch.linalg.solve_ex(a, b, left=left)
    if bool((info == 0).all()) and bool(torch.isfinite(x).all()):
        return x
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    eps = 1e-6 * a.diagonal(dim1=-2, dim2=-1).abs().mean().clamp_min(1e-12)
    x, info = torch.linalg.solve_ex(a + eps * eye, b, left=left)
    if bool((info == 0).all()) and bool(torch.isfinite(x).all()):
        return x
    warnings.warn(
        "LRQK: singular system, falling back to least squares", RuntimeWarning, stacklevel=3
    )
    if left:
        return torch.linalg.lstsq(a, b).solution
    return torch.linalg.lstsq(a.transpose(-1, -2), b.transpose(-1, -2)).solution.transpose(-1, -2)


def _check_rank(rank: int, d: int) -> None:
    check_int("rank", rank, minimum=1, maximum=d)  # d: the head dim


def _init_factors(
    q: torch.Tensor, k: torch.Tensor, rank: int, init: str, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    check_choice("init", init, INITS)
    shape = (*q.shape[:-1], rank)
    if init == "randn":
        a_q = torch.randn(shape, generator=generator, dtype=q.dtype, device="cpu").to(q.device)
        a_k = torch.randn(shape, generator=generator, dtype=q.dtype, device="cpu").to(q.device)
        return a_q, a_k
    if init == "topcol":  # the r columns with the largest L1 norm of |Q| + |K|
        idx = (
            (q.abs().sum(-2, keepdim=True) + k.abs().sum(-2, keepdim=True))
            .topk(rank, dim=-1)
            .indices
        )
        idx = idx.expand(*q.shape[:-1], rank)
        return q.gather(-1, idx), k.gather(-1, idx)
    iq = q.abs().sum(-2, keepdim=True).topk(rank, dim=-1).indices.expand(*q.shape[:-1], rank)
    ik = k.abs().sum(-2, keepdim=True).topk(rank, dim=-1).indices.expand(*k.shape[:-1], rank)
    return q.gather(-1, iq), k.gather(-1, ik)


def als_objective(
    q: torch.Tensor, k: torch.Tensor, f: LowRankQK, lambdas: tuple[float, float] = (1.0, 1.0)
) -> dict[str, float]:
    """The prefill objective and its QK term, relative to ‖QKᵀ‖² (summed over heads)."""
    qk = q @ k.transpose(-1, -2)
    norm = float((qk**2).sum())
    qk_term = float(((qk - f.a_q @ f.a_k.transpose(-1, -2)) ** 2).sum())
    q_term = float(((q - f.a_q @ f.b_q) ** 2).sum())
    k_term = float(((k - f.a_k @ f.b_k) ** 2).sum())
    total = qk_term + lambdas[0] * q_term + lambdas[1] * k_term
    return {"objective": total / norm, "qk_term": qk_term / norm}


def lrqk_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    rank: int,
    iters: int = 2,
    init: str = "randn",
    generator: torch.Generator | None = None,
    *,
    tol: float = 1e-2,
    lambdas: tuple[float, float] = (1.0, 1.0),
    history: list[LowRankQK] | None = None,
) -> LowRankQK:
    """Prefill ALS of LRQK on Q, K (…, l, d) (keys already repeated to the query heads).

    Computed in float32 (float64 inputs stay float64). With ``history`` (a list), the factors after
    every iteration are appended (B recomputed for each), to check the objective's monotonicity.
    """
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have the same shape (…, l, d), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    _check_rank(rank, q.shape[-1])
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    for name, t in (("q", q), ("k", k)):
        # A NaN reaches the ALS solve as a LAPACK error deep inside torch; say it here.
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf values")
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf, kf = q.to(dtype), k.to(dtype)
    lam_q, lam_k = lambdas
    a_q, a_k = _init_factors(qf, kf, rank, init, generator)
    a_q, a_k = a_q.to(dtype), a_k.to(dtype)

    def bs(a_q: torch.Tensor, a_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b_q = _solve(a_q.transpose(-1, -2) @ a_q, a_q.transpose(-1, -2) @ qf)
        b_k = _solve(a_k.transpose(-1, -2) @ a_k, a_k.transpose(-1, -2) @ kf)
        return b_q, b_k

    for _ in range(iters):
        b_q, b_k = bs(a_q, a_k)
        rhs_q = kf.transpose(-1, -2) @ a_k + lam_q * b_q.transpose(-1, -2)
        new_a_q = qf @ _solve(
            a_k.transpose(-1, -2) @ a_k + lam_q * b_q @ b_q.transpose(-1, -2), rhs_q, left=False
        )
        rhs_k = qf.transpose(-1, -2) @ new_a_q + lam_k * b_k.transpose(-1, -2)
        new_a_k = kf @ _solve(
            new_a_q.transpose(-1, -2) @ new_a_q + lam_k * b_k @ b_k.transpose(-1, -2),
            rhs_k,
            left=False,
        )
        delta = max(float(F.mse_loss(a_q, new_a_q)), float(F.mse_loss(a_k, new_a_k)))
        a_q, a_k = new_a_q, new_a_k
        if history is not None:
            hb_q, hb_k = bs(a_q, a_k)
            history.append(LowRankQK(a_q, hb_q, a_k, hb_k))
        if delta < tol:
            break
    b_q, b_k = bs(a_q, a_k)
    return LowRankQK(a_q, b_q, a_k, b_k)


def lrqk_decode_update(
    state: LowRankQK | tuple[torch.Tensor, torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    k_active: torch.Tensor,
    a_k_active: torch.Tensor,
    *,
    iters: int = 2,
    tol: float = 1e-2,
    lambdas: tuple[float, float] = (1.0, 1.0),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decode step of LRQK (``_lrqk_decode_inv_w1``): returns (B_Q, B_K, q̂, k̂).

    ``state`` gives B_Q, B_K (LowRankQK or a (B_Q, B_K) pair); q, k (…, 1, d); K_Ω (…, n, d) and
    A_{K,Ω} (…, n, r) of the resident tokens. B_Q and B_K take one gradient step with the exact
    line-search rate ‖dB‖²/‖x̂·dB‖².
    """
    b_q, b_k = (state.b_q, state.b_k) if isinstance(state, LowRankQK) else state
    lam1, lam2 = lambdas
    dtype = b_q.dtype
    q, k, k_active, a_k_active = (t.to(dtype) for t in (q, k, k_active, a_k_active))
    kbk = k @ b_k.transpose(-1, -2)
    bkbk = b_k @ b_k.transpose(-1, -2)
    rhs_q0 = q @ b_q.transpose(-1, -2) + lam2 * (q @ k_active.transpose(-1, -2)) @ a_k_active
    m_q0 = b_q @ b_q.transpose(-1, -2) + lam2 * a_k_active.transpose(-1, -2) @ a_k_active
    qk = lam1 * (q @ k.transpose(-1, -2))
    k_hat = _solve(bkbk, kbk, left=False)
    q_hat = k_hat
    for _ in range(max(1, iters)):
        q_hat = _solve(
            m_q0 + lam1 * k_hat.transpose(-1, -2) @ k_hat, rhs_q0 + qk @ k_hat, left=False
        )
        new_k = _solve(bkbk + lam1 * q_hat.transpose(-1, -2) @ q_hat, kbk + qk @ q_hat, left=False)
        delta = float(F.mse_loss(k_hat, new_k))
        k_hat = new_k
        if delta < tol:
            break

    def step(b: torch.Tensor, x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        db = x_hat.transpose(-1, -2) @ (x_hat @ b - x)
        num = (db**2).sum(dim=(-2, -1), keepdim=True)
        den = ((x_hat @ db) ** 2).sum(dim=(-2, -1), keepdim=True)
        return b - num / (den + 1e-6) * db

    return step(b_q, q_hat, q), step(b_k, k_hat, k), q_hat, k_hat


def proxy_topk(
    q_hat: torch.Tensor, a_k: torch.Tensor, k: int, exclude_last: int = 0
) -> torch.Tensor:
    """Indices (sorted) of the top-``k`` proxy scores A_K[:l−w]·q̂ᵀ, O(l·r); all candidates if fewer.

    q̂ (…, 1, r), A_K (…, l, r); the last ``exclude_last`` tokens (the window) never compete.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = a_k.shape[-2] - exclude_last
    if n <= 0:
        return torch.zeros(*a_k.shape[:-2], 0, dtype=torch.long, device=a_k.device)
    scores = (a_k[..., :n, :] @ q_hat.transpose(-1, -2)).squeeze(-1)
    if k >= n:
        return torch.arange(n, device=a_k.device).expand(*scores.shape[:-1], n).contiguous()
    return scores.topk(k, dim=-1).indices.sort(dim=-1).values


# ---------------------------------------------------------------------------------------------
# hit/miss store


class HitMissKVStore:
    """Full-precision K/V on an offload device plus resident slots on the compute device.

    ``append(k, v)`` stores new tokens (H, t, d) on the offload device. ``fetch(indices)`` makes the
    rows ``indices[h]`` resident: slots whose token is no longer wanted are overwritten with the
    *missing* tokens only (a hit costs nothing); it returns the resident K, V in the order asked
    and the number of rows copied. ``transferred`` and ``hit_rate`` accumulate over calls.
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        capacity: int,
        *,
        device: str | torch.device = "cpu",
        offload_device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        pin_memory: bool = False,
    ) -> None:
        if num_heads < 1 or head_dim < 1 or capacity < 1:
            raise ValueError(
                f"num_heads, head_dim and capacity must be >= 1, got {num_heads}, {head_dim}, {capacity}"
            )
        self.num_heads, self.head_dim, self.capacity = num_heads, head_dim, capacity
        self.device, self.offload_device = torch.device(device), torch.device(offload_device)
        self.dtype = dtype
        self.pin = (
            bool(pin_memory) and self.offload_device.type == "cpu" and torch.cuda.is_available()
        )
        self._k = self._alloc(1024)
        self._v = self._alloc(1024)
        self.length = 0
        self.slot_index = torch.full(
            (num_heads, capacity), -1, dtype=torch.long, device=self.device
        )
        self.k_slots = torch.zeros(num_heads, capacity, head_dim, dtype=dtype, device=self.device)
        self.v_slots = torch.zeros_like(self.k_slots)
        self.transferred = 0
        self.requested = 0

    def _alloc(self, n: int) -> torch.Tensor:
        t = torch.zeros(
            self.num_heads, n, self.head_dim, dtype=self.dtype, device=self.offload_device
        )
        return t.pin_memory() if self.pin else t

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store tokens k, v of shape (H, t, d) on the offload device."""
        if (
            k.shape != v.shape
            or k.dim() != 3
            or k.shape[0] != self.num_heads
            or k.shape[2] != self.head_dim
        ):
            raise ValueError(
                f"k and v must both have shape ({self.num_heads}, t, {self.head_dim}), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        t = k.shape[1]
        if self.length + t > self._k.shape[1]:
            cap = max(2 * self._k.shape[1], self.length + t)
            nk, nv = self._alloc(cap), self._alloc(cap)
            nk[:, : self.length] = self._k[:, : self.length]
            nv[:, : self.length] = self._v[:, : self.length]
            self._k, self._v = nk, nv
        self._k[:, self.length : self.length + t] = k.detach().to(self.offload_device, self.dtype)
        self._v[:, self.length : self.length + t] = v.detach().to(self.offload_device, self.dtype)
        self.length += t

    @property
    def keys(self) -> torch.Tensor:
        return self._k[:, : self.length]

    @property
    def values(self) -> torch.Tensor:
        return self._v[:, : self.length]

    @property
    def hit_rate(self) -> float:
        return 1.0 - self.transferred / self.requested if self.requested else float("nan")

    def resident(self, head: int) -> set[int]:
        """Token indices currently resident for ``head``."""
        return {int(i) for i in self.slot_index[head].tolist() if i >= 0}

    def fetch(
        self, indices: torch.Tensor | list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
        """Make ``indices[h]`` resident for every head; returns (K per head, V per head, rows copied)."""
        if len(indices) != self.num_heads:
            raise ValueError(
                f"indices must have one entry per head ({self.num_heads}), got {len(indices)}"
            )
        ks, vs, moved = [], [], 0
        for h in range(self.num_heads):
            want = indices[h].to(self.device, torch.long)
            if want.numel() > self.capacity:
                raise ValueError(
                    f"head {h}: {want.numel()} indices exceed the capacity {self.capacity}"
                )
            if want.numel() and (int(want.min()) < 0 or int(want.max()) >= self.length):
                raise ValueError(f"head {h}: indices must lie in [0, {self.length})")
            cur = self.slot_index[h]
            hit = torch.isin(want, cur)
            missing = want[~hit]
            free = torch.nonzero(~torch.isin(cur, want)).squeeze(-1)[: missing.numel()]
            if missing.numel():
                src = missing.to(self.offload_device)
                self.k_slots[h, free] = self._k[h, src].to(self.device, non_blocking=True)
                self.v_slots[h, free] = self._v[h, src].to(self.device, non_blocking=True)
                self.slot_index[h, free] = missing
            moved += missing.numel()
            self.requested += want.numel()
            pos = _positions(self.slot_index[h], want)
            ks.append(self.k_slots[h, pos])
            vs.append(self.v_slots[h, pos])
        self.transferred += moved
        return ks, vs, moved


def _tail(x: torch.Tensor, w: int) -> torch.Tensor:
    """The last ``w`` tokens (dim 1) of x; empty for w = 0."""
    return x[:, x.shape[1] - w :] if w > 0 else x[:, :0]


def _positions(slots: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Slot position of each wanted token (all are resident)."""
    order = slots.argsort()
    sorted_slots = slots[order]
    return order[torch.searchsorted(sorted_slots, want)]


# ---------------------------------------------------------------------------------------------
# exact attention over a selected subset (reference + Triton)


def sparse_decode_attention(
    q: torch.Tensor,
    k_store: torch.Tensor,
    v_store: torch.Tensor,
    indices: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Exact softmax attention of one query per head over the rows ``indices`` of the K/V store.

    q (H, d); k_store, v_store (H_kv, L, d) with H a multiple of H_kv (GQA); indices (H, n), −1 pads.
    Returns (H, d) in q's dtype. ``backend``: "reference" (gather + softmax), "triton" (kernel,
    interpreted on CPU) or "auto" (Triton on CUDA, reference on CPU).
    """
    check_choice("backend", backend, ("auto", "reference", "triton"))
    if q.dim() != 2 or k_store.dim() != 3 or v_store.shape != k_store.shape or indices.dim() != 2:
        raise ValueError(
            "expected q (H, d), k_store/v_store (H_kv, L, d) and indices (H, n), got "
            f"{tuple(q.shape)}, {tuple(k_store.shape)}, {tuple(v_store.shape)}, {tuple(indices.shape)}"
        )
    h, d = q.shape
    hk = k_store.shape[0]
    if k_store.shape[-1] != d:
        raise ValueError(
            f"q and k_store must have the same head dim, got {d} and {k_store.shape[-1]}"
        )
    if h % hk or indices.shape[0] != h:
        raise ValueError(
            f"query heads ({h}) must be a multiple of kv heads ({hk}) and match indices ({indices.shape[0]})"
        )
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    use_triton = backend == "triton" or (backend == "auto" and q.device.type == "cuda")
    if use_triton:
        return _sparse_triton(q, k_store, v_store, indices, scale)
    group = h // hk
    heads = torch.arange(h, device=q.device) // group
    valid = indices >= 0
    safe = indices.clamp_min(0)
    kk = k_store[heads[:, None], safe].float()  # (H, n, d)
    vv = v_store[heads[:, None], safe].float()
    s = (kk @ q.float().unsqueeze(-1)).squeeze(-1) * scale
    s = s.masked_fill(~valid, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p.unsqueeze(-2) @ vv).squeeze(-2).to(q.dtype)


def _sparse_triton(
    q: torch.Tensor,
    k_store: torch.Tensor,
    v_store: torch.Tensor,
    indices: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    from eff_kernels._triton import interpret_for, kernels, launch_env

    h, d = q.shape
    dp = max(16, 1 << (d - 1).bit_length())
    if dp != d:
        q, k_store, v_store = (F.pad(t, (0, dp - d)) for t in (q, k_store, v_store))
    q, k_store, v_store = q.contiguous(), k_store.contiguous(), v_store.contiguous()
    idx = indices.to(torch.int32).contiguous()
    out = torch.empty(h, dp, dtype=q.dtype, device=q.device)
    interpret = interpret_for(q.device)
    mod = kernels("lrqk", q.device)
    with launch_env(interpret):
        mod.sparse_decode_kernel[(h,)](
            q, k_store, v_store, idx, out,
            q.stride(0), k_store.stride(0), k_store.stride(1), v_store.stride(0), v_store.stride(1),
            idx.stride(0), out.stride(0),
            idx.shape[1], h // k_store.shape[0], scale * 1.4426950408889634,
            HEAD_DIM=dp, BLOCK=64,
        )  # fmt: skip
    return out[:, :d]


# ---------------------------------------------------------------------------------------------
# one layer's LRQK state


class LRQKState:
    """LRQK for one attention layer: prefill factors, decode updates, selection, hit/miss store.

    Heads are flattened over the batch: ``B·H_q`` selections, ``B·H_kv`` stores. The store of a KV
    head keeps the union of its query heads' selections resident, so GQA never multiplies the
    transfers. Each sequence of a batch runs its own prefill ALS from the same seeded start, so
    its factors, selections and outputs equal those of the sequence alone. Prompts no longer than
    ``collect_until`` (default ``top_k + window``) stay in a plain "collecting" state (exact
    attention, queries recorded) until the length exceeds it; then the ALS runs.
    """

    def __init__(
        self,
        config: LRQKConfig,
        num_q_heads: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        batch: int = 1,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        scale: float | None = None,
        collect_until: int | None = None,
    ) -> None:
        _check_rank(config.rank, head_dim)
        if num_q_heads % num_kv_heads:
            raise ValueError(
                f"query heads ({num_q_heads}) must be a multiple of kv heads ({num_kv_heads})"
            )
        self.cfg = config
        self.hq, self.hkv, self.d, self.b = num_q_heads, num_kv_heads, head_dim, batch
        self.group = num_q_heads // num_kv_heads
        self.device = torch.device(device)
        self.dtype = dtype
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        self.store = HitMissKVStore(
            batch * num_kv_heads,
            head_dim,
            self.group * config.top_k,
            device=self.device,
            offload_device=config.offload_device,
            dtype=dtype,
            pin_memory=config.pin_memory,
        )
        self.generator = (
            torch.Generator().manual_seed(config.seed) if config.seed is not None else None
        )
        self.length = 0
        self.active = False
        self.q_hist: list[torch.Tensor] = []
        self.k_recent = torch.zeros(
            batch * num_kv_heads, 0, head_dim, dtype=dtype, device=self.device
        )
        self.v_recent = torch.zeros_like(self.k_recent)
        self.selected: torch.Tensor | None = None  # (B·Hq, k) token indices
        self.a_k = torch.zeros(0)
        self.b_q = self.b_k = torch.zeros(0)
        self.last_transferred = 0
        self.steps = 0
        # plain exact attention while the length is at most this (default top_k + window)
        self.collect_until = (
            config.top_k + config.window if collect_until is None else collect_until
        )

    # shapes: q (B, Hq, t, d); k, v (B, Hkv, t, d)
    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, x.shape[-2], x.shape[-1])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens on the offload device and, once active, in the recent window (device)."""
        kf, vf = self._flat(k).to(self.dtype), self._flat(v).to(self.dtype)
        self.store.append(kf, vf)
        self.length += kf.shape[1]
        if self.active:
            self.k_recent = _tail(
                torch.cat([self.k_recent, kf.to(self.device)], dim=1), self.cfg.window
            )
            self.v_recent = _tail(
                torch.cat([self.v_recent, vf.to(self.device)], dim=1), self.cfg.window
            )

    def _kv_heads(self) -> torch.Tensor:
        return torch.arange(self.b * self.hq, device=self.device) // self.group

    def _start(self) -> None:
        """Run the prefill ALS on the recorded queries and all keys, select, fill the slots."""
        q = torch.cat(self.q_hist, dim=1)  # (B·Hq, l, d)
        k = self.store.keys.to(self.device)[self._kv_heads()]
        if self.b == 1:
            f = self._prefill_one(q, k, self.generator)
        else:
            # One ALS per sequence, each from the seeded start it would get alone (and its own
            # stopping rule): a sequence's factors never depend on the rest of the batch.
            hq = self.hq
            parts = [
                self._prefill_one(q[i * hq : (i + 1) * hq], k[i * hq : (i + 1) * hq], self._fresh_generator())
                for i in range(self.b)
            ]  # fmt: skip
            f = LowRankQK(*(torch.cat(ts, dim=0) for ts in zip(*parts, strict=True)))
        self.a_k, self.b_q, self.b_k = f.a_k, f.b_q, f.b_k
        self.q_hist = []
        self.active = True
        w = self.cfg.window
        self.k_recent = _tail(self.store.keys, w).to(self.device)
        self.v_recent = _tail(self.store.values, w).to(self.device)
        sel = proxy_topk(f.a_q[..., -1:, :], self.a_k, self.cfg.top_k, exclude_last=w)
        self._select(sel)

    def _select(self, sel: torch.Tensor) -> None:
        self.selected = sel
        wanted = []
        for j in range(self.b * self.hkv):
            rows = sel[j * self.group : (j + 1) * self.group].flatten()
            wanted.append(torch.unique(rows))
        _, _, moved = self.store.fetch(wanted)
        self.last_transferred = moved

    def _fresh_generator(self) -> torch.Generator | None:
        return torch.Generator().manual_seed(self.cfg.seed) if self.cfg.seed is not None else None

    def _prefill_one(
        self, q: torch.Tensor, k: torch.Tensor, generator: torch.Generator | None
    ) -> LowRankQK:
        return lrqk_prefill(
            q, k, self.cfg.rank, self.cfg.iters[0], self.cfg.init, generator,
            tol=self.cfg.tol, lambdas=self.cfg.lambdas[:2],
        )  # fmt: skip

    def prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Record a prompt (q after RoPE; k, v as cached). Attention itself is the caller's full attention."""
        self.append(k, v)
        self.q_hist.append(self._flat(q).to(self.dtype))
        if self.length > self.collect_until:
            self._start()

    def decode(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """One decode step (q (B, Hq, 1, d); k, v (B, Hkv, 1, d)): returns (O (B, Hq, 1, d), info)."""
        if q.shape[-2] != 1:
            raise NotImplementedError(
                "LRQK decodes one token per step (q_len > 1 after prefill is not supported)"
            )
        qf = self._flat(q).to(self.dtype)
        if not self.active:
            self.append(k, v)
            self.q_hist.append(qf)
            n = self.length
            idx = torch.arange(n, device=self.device).expand(self.b * self.hq, n)
            out = sparse_decode_attention(
                qf[:, 0], self.store.keys.to(self.device), self.store.values.to(self.device), idx,
                self.scale, self._backend(),
            )  # fmt: skip
            if self.length > self.collect_until:
                self._start()
            return out.reshape(q.shape).to(q.dtype), {"transferred": 0, "active": False}
        kv = self._kv_heads()
        kf = self._flat(k).to(self.dtype)[kv]
        # Ω = resident tokens before this step: selection + window
        k_sel = self._resident_keys()
        n_win = self.k_recent.shape[1]
        k_omega = torch.cat([k_sel, self.k_recent[kv]], dim=1)
        win_idx = torch.arange(self.length - n_win, self.length, device=self.device).expand(
            len(kv), n_win
        )
        omega_idx = torch.cat([self.selected, win_idx], dim=1)
        a_omega = self.a_k.gather(1, omega_idx.unsqueeze(-1).expand(-1, -1, self.cfg.rank))
        self.b_q, self.b_k, q_hat, k_hat = lrqk_decode_update(
            (self.b_q, self.b_k), qf, kf, k_omega, a_omega,
            iters=self.cfg.iters[1], tol=self.cfg.tol, lambdas=self.cfg.lambdas[2:],
        )  # fmt: skip
        self.a_k = torch.cat([self.a_k, k_hat], dim=1)
        self.append(k, v)
        sel = proxy_topk(q_hat, self.a_k, self.cfg.top_k, exclude_last=self.cfg.window)
        self._select(sel)
        out = self._attend(qf)
        self.steps += 1
        info = {
            "transferred": self.last_transferred,
            "active": True,
            "selected": sel,
            "q_hat": q_hat,
        }
        return out.reshape(q.shape).to(q.dtype), info

    def _resident_keys(self) -> torch.Tensor:
        kv = self._kv_heads()
        slots = self.store.slot_index[kv]
        out = []
        for h in range(len(kv)):
            pos = _positions(slots[h], self.selected[h])
            out.append(self.store.k_slots[kv[h], pos])
        return torch.stack(out)

    def resident_indices(self, head: int) -> set[int]:
        """Token indices attended by query head ``head`` this step: its selection plus the window."""
        win = set(range(self.length - self.k_recent.shape[1], self.length))
        return {int(i) for i in self.selected[head].tolist()} | win

    def _attend(self, qf: torch.Tensor) -> torch.Tensor:
        """Exact attention of each query head over its selected slots and the window."""
        kv = self._kv_heads()
        cap = self.store.capacity
        pool_k = torch.cat([self.store.k_slots, self.k_recent], dim=1)  # (B·Hkv, cap + w, d)
        pool_v = torch.cat([self.store.v_slots, self.v_recent], dim=1)
        n_win = self.k_recent.shape[1]
        pos = torch.stack(
            [_positions(self.store.slot_index[kv[h]], self.selected[h]) for h in range(len(kv))]
        )
        win = torch.arange(cap, cap + n_win, device=self.device).expand(len(kv), n_win)
        idx = torch.cat([pos, win], dim=1)
        return sparse_decode_attention(qf[:, 0], pool_k, pool_v, idx, self.scale, self._backend())

    def _backend(self) -> str:
        return self.cfg.backend


# ---------------------------------------------------------------------------------------------
# transformers integration (imported lazily)

_HF_CLASSES: dict[str, type] = {}


def _hf_classes() -> dict[str, type]:
    if _HF_CLASSES:
        return _HF_CLASSES
    from transformers.cache_utils import Cache, CacheLayerMixin

    class LRQKLayer(CacheLayerMixin):
        """Cache layer of LRQK: stores K/V through :class:`LRQKState` and returns only the new K/V."""

        is_compileable = False
        is_sliding = False

        def __init__(self, config: LRQKConfig) -> None:
            super().__init__()
            self.config = config
            self.state: LRQKState | None = None
            self.cumulative_length = 0
            self.decoded = False

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.device = key_states.device
            self.dtype = key_states.dtype
            self.is_initialized = True

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.cumulative_length += key_states.shape[-2]
            return key_states, value_states

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.cumulative_length + query_length, 0

        def get_seq_length(self) -> int:
            return self.cumulative_length

        def get_max_length(self) -> int:
            return -1

        def reset(self) -> None:
            self.state = None
            self.cumulative_length = 0
            self.decoded = False
            self.is_initialized = False

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            raise NotImplementedError("LRQK does not support beam search (reorder_cache)")

        def crop(self, tokens_to_remove: int) -> None:
            raise NotImplementedError("LRQK does not support cropping the cache")

    class LRQKCache(Cache):
        """A transformers ``Cache`` whose layers hold LRQK state (one :class:`LRQKState` per layer)."""

        def __init__(self, config: LRQKConfig, num_layers: int) -> None:
            super().__init__(layers=[LRQKLayer(config) for _ in range(num_layers)])
            self.config = config

    _HF_CLASSES.update(LRQKLayer=LRQKLayer, LRQKCache=LRQKCache)
    return _HF_CLASSES


def __getattr__(name: str) -> Any:
    if name in ("LRQKCache", "LRQKLayer"):
        return _hf_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lrqk_attention(
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
    """transformers attention function "lrqk": full attention in prefill, LRQK in decode."""
    cache = getattr(module, "_lrqk_cache", None)
    if cache is None:
        raise RuntimeError("the 'lrqk' attention needs enable_lrqk(model, config) first")
    layer = cache.layers[module.layer_idx]
    b, hq, n, d = query.shape
    hkv = key.shape[1]
    if (
        attention_mask is not None
        and attention_mask.dtype == torch.bool
        and not bool(attention_mask.all())
        and n == 1
    ):
        raise NotImplementedError(
            "LRQK does not support padding masks (batch > 1 with left padding)"
        )
    if layer.state is None:
        layer.state = LRQKState(
            cache.config,
            hq,
            hkv,
            d,
            batch=b,
            device=query.device,
            dtype=torch.float32,
            scale=scaling,
        )
    state: LRQKState = layer.state
    if n > 1 or state.length == 0:
        if layer.decoded:
            raise NotImplementedError("LRQK decodes one token per step (q_len > 1 after prefill)")
        if (
            attention_mask is not None
            and attention_mask.dtype == torch.bool
            and not _is_causal_mask(attention_mask)
        ):
            raise NotImplementedError(
                "LRQK does not support padding masks (batch > 1 with left padding)"
            )
        causal = attention_mask is None and n > 1
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            is_causal=causal,
            scale=scaling,
            enable_gqa=hq != hkv,
        )
        state.prefill(query, key, value)
    else:
        layer.decoded = True
        out, _ = state.decode(query, key, value)
    return out.transpose(1, 2).contiguous(), None


def _is_causal_mask(mask: torch.Tensor) -> bool:
    n, m = mask.shape[-2:]
    causal = torch.ones(n, m, dtype=torch.bool, device=mask.device).tril(diagonal=m - n)
    return bool((mask == causal).all())


def enable_lrqk(model: torch.nn.Module, config: LRQKConfig | None = None) -> Any:
    """Route a transformers model's attention through LRQK; returns a fresh ``LRQKCache``.

    Registers the attention function ``"lrqk"`` (masks as for SDPA), switches the model to it and
    binds the returned cache to every attention module. Pass the cache to ``generate``:
    ``model.generate(**inputs, cache=cache, max_new_tokens=...)`` (transformers 5 deprecates
    ``past_key_values=`` there); call again for a new sequence. Batch > 1 with padding, beam search and multi-token decode raise NotImplementedError.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = config or LRQKConfig()
    AttentionInterface.register("lrqk", _lrqk_attention)
    AttentionMaskInterface.register("lrqk", sdpa_mask)
    model.set_attn_implementation("lrqk")
    n_layers = model.config.get_text_config().num_hidden_layers
    cache = _hf_classes()["LRQKCache"](config, n_layers)
    bound = 0
    for mod in model.modules():
        if hasattr(mod, "layer_idx") and hasattr(mod, "num_key_value_groups"):
            mod._lrqk_cache = cache
            bound += 1
    if bound == 0:
        raise ValueError("no attention module with layer_idx found in the model")
    return cache

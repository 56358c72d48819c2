"""LoRASuite — transfer a LoRA from an old LLM version to an updated one (arXiv 2505.13515; code
``YananLi18/LoRASuite``, ``lora_adaption.py``).

Reads and writes **standard peft LoRA weights** (``...lora_A.weight`` / ``...lora_B.weight``, ΔW = B A
up to peft's α/r scaling, which is kept), so the result loads with ``set_peft_model_state_dict`` or
``PeftModel.from_pretrained``. Steps (row-vector convention, h_new ≈ h_old W_x):

1. **Transfer matrix** W_x = pinv(E_old[common]) E_new[common] ∈ R^{d_old×d_new}: least squares over the
   input-embedding rows of the tokens common to both vocabularies, matched **by string**.
2. **Layer map** by linear CKA, ‖YᵀX‖_F² / (‖XᵀX‖_F ‖YᵀY‖_F) on centred layer outputs of the same
   calibration tokens, then the official ``max_layer_similarity_mapping``: a **monotone dynamic
   programme** (strictly increasing i → j maximising Σ S[i, j]), not a matching.
3. **Head map** per mapped layer pair: old head a → [W_xᵀ Q_aᵀ K_a W_x, W_xᵀ V_aᵀ O_aᵀ W_x] (QK and VO
   circuits in the new basis), new head b → [Q_bᵀ K_b, V_bᵀ O_bᵀ]; Hungarian assignment on −cosine.
   Grouped-query attention is expanded to multi-head (``repeat_kv``) and K/V deltas are averaged back
   over the replicas of each new key/value head.
4. **ΔW transforms**, old head a → new head b (``head_transform="official"``):
   T_Q = Q_a W_x Q_bᵀ, ΔQ_new[b] = T_Qᵀ ΔQ_old[a] W_x (same for K, V);
   T_O = O_old[:, a]ᵀ W_x O_new[:, b], ΔO_new[:, b] = W_xᵀ ΔO_old[:, a] T_O;
   MLP up/gate: B' = W_new pinv(W_x) pinv(W_old) B, A' = A W_x; down: B' = pinv(W_x) B,
   A' = A pinv(W_old) W_x W_new. Attention deltas are cut back to the old rank by truncated SVD,
   B = U_r √S_r, A = √S_r V_rᵀ.
5. **LFT** (lightweight fine-tuning): peft LoRA training from the transferred weights; modules without
   transferred weights get A = B = 0 and are frozen (:func:`prepare_lft_model`).

Named discrepancies (the spec's traps):

- The official head transform multiplies by a Gram factor (T_Q = Q_a Q_aᵀ for a pure rotation) and is
  **not exact even when the new model is an exact rotation of the old one**; it scales each attention
  delta by ≈ the squared norm of the head weights: O(1) in real LLMs, ≈ 0.013 for a d = 32 toy at HF's
  ``initializer_range`` 0.02 (the reproduction draws its toy at std 1/√d). ``head_transform=
  "exact"`` (ours) replaces the transposes by least-squares head-basis maps, T_Q = Q_b pinv(Q_a W_x)
  and T_O = pinv(W_xᵀ O_a) O_b, which are exact for a rotation + head permutation.
- The MLP formulas project B onto col(W_old) (and A onto row(W_old) for ``down``): information is lost
  when the FFN is wider than the model. Both modes use them.
- W_x is rank-deficient when fewer than d_old tokens are shared: that is an error here.
- The official code transposes the CKA matrix when the new model has fewer layers; we raise instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

from eff_llm._adapters import peft_deprecations_silenced
from eff_shared.errors import check_choice, check_positive
from eff_shared.torch import seeded

__all__ = [
    "AttentionWeights",
    "LoRASuiteConfig",
    "TransferReport",
    "UpdateTruth",
    "derive_updated_model",
    "embedding_transfer_matrix",
    "head_alignment",
    "head_similarity",
    "linear_cka",
    "monotone_layer_alignment",
    "prepare_lft_model",
    "transfer_lora",
]

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
_KEY = re.compile(
    r"^(?P<prefix>.*\.)(?P<layer>\d+)\.(?P<module>self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)"
    r"\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$"
)


@dataclass
class LoRASuiteConfig:
    """``layer_method``: ``"cka_dp"`` (CKA + monotone DP) or ``"identity"`` (old layer i → new layer
    i); ``head_transform``: ``"official"`` (Gram-factor formula) or ``"exact"`` (least-squares head
    bases); ``transfer_matrix``: ``"embedding_lstsq"`` or ``"identity"`` (official for Pythia/Qwen
    pairs; needs d_old = d_new); ``calib_batch``: calibration sequences used for CKA."""

    layer_method: Literal["cka_dp", "identity"] = "cka_dp"
    head_transform: Literal["official", "exact"] = "official"
    transfer_matrix: Literal["embedding_lstsq", "identity"] = "embedding_lstsq"
    calib_batch: int = 512

    def __post_init__(self) -> None:
        check_choice("layer_method", self.layer_method, ["cka_dp", "identity"])
        check_choice("head_transform", self.head_transform, ["official", "exact"])
        check_choice("transfer_matrix", self.transfer_matrix, ["embedding_lstsq", "identity"])
        check_positive("calib_batch", self.calib_batch, integer=True)


# ------------------------------------------------------------------------------------------------
# 1-3: transfer matrix, CKA + DP layer map, head map


def embedding_transfer_matrix(
    E_old: torch.Tensor,
    E_new: torch.Tensor,
    vocab_old: Mapping[str, int],
    vocab_new: Mapping[str, int],
) -> torch.Tensor:
    """W_x = pinv(E_old[common]) E_new[common] (float32, d_old × d_new), tokens matched by string.

    Raises ``ValueError`` when fewer tokens are shared than the old width (W_x would be
    rank-deficient) or when a vocabulary id is outside its embedding matrix.
    """
    if E_old.ndim != 2 or E_new.ndim != 2:
        raise ValueError("E_old and E_new must be (vocab, hidden) matrices")
    common = sorted(set(vocab_old) & set(vocab_new))
    if len(common) < E_old.shape[1]:
        raise ValueError(
            f"only {len(common)} tokens are common to both vocabularies, fewer than the old hidden "
            f"size {E_old.shape[1]}: the least-squares transfer matrix would be rank-deficient"
        )
    rows_old = torch.tensor([vocab_old[t] for t in common])
    rows_new = torch.tensor([vocab_new[t] for t in common])
    for name, rows, E in (("vocab_old", rows_old, E_old), ("vocab_new", rows_new, E_new)):
        if int(rows.min()) < 0 or int(rows.max()) >= E.shape[0]:
            raise ValueError(f"{name} has ids outside [0, {E.shape[0]}) of its embedding matrix")
    a = E_old.detach().float()[rows_old.to(E_old.device)].cpu()
    b = E_new.detach().float()[rows_new.to(E_new.device)].cpu()
    return torch.linalg.pinv(a) @ b


def linear_cka(X: torch.Tensor | np.ndarray, Y: torch.Tensor | np.ndarray) -> float:
    """Linear CKA ‖YᵀX‖_F² / (‖XᵀX‖_F ‖YᵀY‖_F) of centred ``X (n, d1)`` and ``Y (n, d2)`` (float64)."""
    x = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X.detach().cpu())
    y = torch.as_tensor(np.asarray(Y) if not isinstance(Y, torch.Tensor) else Y.detach().cpu())
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and Y must be (n, d) with the same n, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    x = x.double() - x.double().mean(0)
    y = y.double() - y.double().mean(0)
    denom = torch.linalg.norm(x.t() @ x) * torch.linalg.norm(y.t() @ y)
    if float(denom) == 0.0:
        raise ValueError("linear_cka is undefined for constant activations")
    return float(torch.linalg.norm(y.t() @ x) ** 2 / denom)


def monotone_layer_alignment(S: np.ndarray) -> list[int]:
    """Strictly increasing map old layer i → new layer j maximising Σ_i S[i, j] (official DP).

    ``S`` is (n_old, n_new); raises ``ValueError`` when n_old > n_new (the official code silently
    transposes). Ties go to the smallest index, as in the official loop.
    """
    S = np.asarray(S, dtype=float)
    if S.ndim != 2 or 0 in S.shape:
        raise ValueError(f"S must be a non-empty (n_old, n_new) matrix, got shape {S.shape}")
    n, m = S.shape
    if n > m:
        raise ValueError(
            f"the old model has more layers ({n}) than the new one ({m}); a strictly increasing "
            "layer map needs n_old <= n_new"
        )
    dp = np.full((n, m), -np.inf)
    back = np.zeros((n, m), dtype=int)
    dp[0, : m - n + 1] = S[0, : m - n + 1]
    for i in range(1, n):
        for j in range(i, m - n + i + 1):
            k = int(np.argmax(dp[i - 1, i - 1 : j])) + i - 1
            dp[i, j] = dp[i - 1, k] + S[i, j]
            back[i, j] = k
    j = int(np.argmax(dp[n - 1, n - 1 :])) + n - 1
    mapping = [0] * n
    for i in range(n - 1, -1, -1):
        mapping[i] = j
        j = back[i, j]
    return mapping


@dataclass
class AttentionWeights:
    """q (H·h, d), k and v (H_kv·h, d), o (d, H·h) of one attention layer (float32 copies)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    o: torch.Tensor
    num_heads: int
    num_kv_heads: int

    def __post_init__(self) -> None:
        check_positive("num_heads", self.num_heads, integer=True)
        check_positive("num_kv_heads", self.num_kv_heads, integer=True)
        if self.q.shape[0] % self.num_heads:
            raise ValueError(
                f"the head dim does not divide the q projection: {self.q.shape[0]} rows for "
                f"{self.num_heads} heads"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}"
            )
        hd = self.head_dim
        if self.k.shape[0] != self.num_kv_heads * hd or self.v.shape != self.k.shape:
            raise ValueError(
                f"k/v must have {self.num_kv_heads}·{hd} rows, got {tuple(self.k.shape)}"
            )
        if self.o.shape[1] != self.q.shape[0]:
            raise ValueError(f"o must have {self.q.shape[0]} columns, got {tuple(self.o.shape)}")

    @property
    def head_dim(self) -> int:
        return self.q.shape[0] // self.num_heads

    @property
    def n_rep(self) -> int:
        return self.num_heads // self.num_kv_heads

    def expand(self, w: torch.Tensor) -> torch.Tensor:
        """``repeat_kv`` on a (H_kv·h, ·) matrix → (H·h, ·)."""
        hd = self.head_dim
        return (
            w.reshape(self.num_kv_heads, hd, -1)
            .repeat_interleave(self.n_rep, 0)
            .reshape(-1, w.shape[-1])
        )

    def head(self, a: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q_a, K_a, V_a (h × d, K/V of a's key/value group) and O_a = o[:, a-block] (d × h)."""
        hd, g = self.head_dim, a // self.n_rep
        sl, kv = slice(a * hd, (a + 1) * hd), slice(g * hd, (g + 1) * hd)
        return self.q[sl], self.k[kv], self.v[kv], self.o[:, sl]

    @classmethod
    def from_module(cls, attn: nn.Module, num_heads: int, num_kv_heads: int) -> AttentionWeights:
        def w(name: str) -> torch.Tensor:
            lin = getattr(attn, name, None)
            if not isinstance(lin, nn.Linear):
                raise TypeError(f"attention module {type(attn).__name__} has no nn.Linear {name!r}")
            return lin.weight.detach().float().cpu()

        return cls(w("q_proj"), w("k_proj"), w("v_proj"), w("o_proj"), num_heads, num_kv_heads)


def head_similarity(old: AttentionWeights, new: AttentionWeights, W_x: torch.Tensor) -> np.ndarray:
    """Cosine similarity (H_old × H_new) of the QK and VO circuits, old ones moved by W_x."""
    W_x = W_x.float()
    sim = np.zeros((old.num_heads, new.num_heads))
    vec_new = []
    for b in range(new.num_heads):
        q, k, v, o = new.head(b)
        vec_new.append(torch.cat([(q.t() @ k).reshape(-1), (v.t() @ o.t()).reshape(-1)]))
    for a in range(old.num_heads):
        q, k, v, o = old.head(a)
        va = torch.cat(
            [(W_x.t() @ q.t() @ k @ W_x).reshape(-1), (W_x.t() @ v.t() @ o.t() @ W_x).reshape(-1)]
        )
        for b, vb in enumerate(vec_new):
            sim[a, b] = float(torch.dot(va, vb) / (va.norm() * vb.norm()))
    return sim


def head_alignment(
    old_attn: AttentionWeights, new_attn: AttentionWeights, W_x: torch.Tensor
) -> np.ndarray:
    """Old head a → new head ``map[a]`` by Hungarian assignment on −cosine (QK and VO circuits)."""
    if old_attn.num_heads > new_attn.num_heads:
        raise ValueError(
            f"the old layer has more heads ({old_attn.num_heads}) than the new one "
            f"({new_attn.num_heads}): heads cannot be mapped one-to-one"
        )
    _, cols = linear_sum_assignment(-head_similarity(old_attn, new_attn, W_x))
    return cols


# ------------------------------------------------------------------------------------------------
# 4: the per-module transforms


def _low_rank(delta: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated SVD: B = U_r √S_r, A = √S_r V_rᵀ."""
    U, S, Vh = torch.linalg.svd(delta, full_matrices=False)
    root = S[:rank].sqrt()
    return U[:, :rank] * root, root[:, None] * Vh[:rank]


def _attention_deltas(
    old: AttentionWeights,
    new: AttentionWeights,
    deltas: Mapping[str, torch.Tensor],
    W_x: torch.Tensor,
    head_map: np.ndarray,
    mode: str,
) -> dict[str, torch.Tensor]:
    """New-model ΔW of q/k/v/o (those present in ``deltas``), head by head."""
    hd_o, hd_n = old.head_dim, new.head_dim
    d_new = W_x.shape[1]
    out: dict[str, torch.Tensor] = {}
    for name in ("q_proj", "k_proj", "v_proj"):
        if name not in deltas:
            continue
        row = {"q_proj": 0, "k_proj": 1, "v_proj": 2}[name]
        dq = deltas[name] if name == "q_proj" else old.expand(deltas[name])
        new_delta = torch.zeros(new.num_heads * hd_n, d_new)
        for a, b in enumerate(head_map):
            w_a, w_b = old.head(a)[row], new.head(int(b))[row]
            if mode == "official":
                T = (w_a @ W_x @ w_b.t()).t()
            else:
                T = w_b @ torch.linalg.pinv(w_a @ W_x)
            new_delta[b * hd_n : (b + 1) * hd_n] = T @ dq[a * hd_o : (a + 1) * hd_o] @ W_x
        if name != "q_proj":  # average back over the replicas of each new key/value head
            new_delta = new_delta.reshape(new.num_kv_heads, new.n_rep, hd_n, d_new).mean(1)
            new_delta = new_delta.reshape(-1, d_new)
        out[name] = new_delta
    if "o_proj" in deltas:
        d_o = deltas["o_proj"]
        new_delta = torch.zeros(d_new, new.num_heads * hd_n)
        for a, b in enumerate(head_map):
            o_a, o_b = old.head(a)[3], new.head(int(b))[3]
            if mode == "official":
                T = o_a.t() @ W_x @ o_b
            else:
                T = torch.linalg.pinv(W_x.t() @ o_a) @ o_b
            new_delta[:, b * hd_n : (b + 1) * hd_n] = (
                W_x.t() @ d_o[:, a * hd_o : (a + 1) * hd_o] @ T
            )
        out["o_proj"] = new_delta
    return out


def _mlp_factors(
    name: str,
    B: torch.Tensor,
    A: torch.Tensor,
    W_old: torch.Tensor,
    W_new: torch.Tensor,
    W_x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Official MLP formulas (factors transformed directly, no SVD)."""
    if name == "down_proj":
        return torch.linalg.pinv(W_x) @ B, A @ torch.linalg.pinv(W_old) @ W_x @ W_new
    return W_new @ torch.linalg.pinv(W_x) @ torch.linalg.pinv(W_old) @ B, A @ W_x


# ------------------------------------------------------------------------------------------------
# the driver


@dataclass
class TransferReport:
    """What :func:`transfer_lora` did: the peft ``LoraConfig`` to load the weights with, W_x, the CKA
    matrix (old × new) and layer map, per old layer the head map and similarities, and the new-model
    modules that received weights / received none (zero and frozen in LFT)."""

    lora_config: Any
    transfer_matrix: torch.Tensor
    layer_map: list[int]
    cka: np.ndarray | None = None
    head_maps: dict[int, np.ndarray] = field(default_factory=dict)
    head_similarity: dict[int, np.ndarray] = field(default_factory=dict)
    common_tokens: int = 0
    transferred_modules: list[str] = field(default_factory=list)


def _decoder_layers(model: nn.Module, layers: Callable[[nn.Module], Sequence[nn.Module]] | None):
    if layers is not None:
        found = list(layers(model))
    else:
        inner = getattr(model, "model", None)
        found = getattr(inner, "layers", None)
        if found is None:
            raise TypeError(
                f"{type(model).__name__} is not a Llama-style model (no model.model.layers); pass "
                "layers=callable(model) -> the decoder layers"
            )
        found = list(found)
    for layer in found:
        if not isinstance(getattr(layer, "self_attn", None), nn.Module) or not isinstance(
            getattr(layer, "mlp", None), nn.Module
        ):
            raise TypeError(
                f"decoder layer {type(layer).__name__} lacks the Llama-style self_attn / mlp modules"
            )
    return found


def _head_counts(model: nn.Module) -> tuple[int, int]:
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "num_attention_heads"):
        raise TypeError(f"{type(model).__name__} has no config.num_attention_heads")
    heads = cfg.num_attention_heads
    return heads, getattr(cfg, "num_key_value_heads", None) or heads


def _read_adapter(
    old_adapter: Mapping[str, torch.Tensor] | str | Path, lora_alpha: float | None
) -> tuple[dict[str, torch.Tensor], float | None]:
    """The LoRA tensors and α: from ``adapter_config.json`` for a directory, else the argument."""
    if isinstance(old_adapter, (str, Path)):
        from peft import load_peft_weights

        path = Path(old_adapter)
        cfg_file = path / "adapter_config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"no adapter_config.json in {path}")
        alpha = json.loads(cfg_file.read_text()).get("lora_alpha")
        return dict(load_peft_weights(str(path), device="cpu")), alpha
    if not isinstance(old_adapter, Mapping):
        raise TypeError(
            f"old_adapter must be a state dict or a directory, got {type(old_adapter).__name__}"
        )
    return dict(old_adapter), lora_alpha


def _parse_adapter(
    state: Mapping[str, torch.Tensor], n_layers: int
) -> tuple[str, dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]], int]:
    """Group peft LoRA tensors by (layer, module); returns the key prefix, factors and the rank."""
    parts: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    prefixes, unsupported = set(), []
    for key, value in state.items():
        m = _KEY.match(key)
        if m is None:
            unsupported.append(key)
            continue
        prefixes.add(m["prefix"])
        parts.setdefault((int(m["layer"]), m["module"]), {})[m["ab"]] = value.detach().float().cpu()
    if unsupported:
        raise ValueError(
            "old_adapter has keys LoRASuite cannot transfer (only decoder q/k/v/o/gate/up/down LoRA "
            f"factors): {unsupported[:8]}"
        )
    if len(prefixes) != 1:
        raise ValueError(f"old_adapter keys must share one prefix, got {sorted(prefixes)}")
    prefix = next(iter(prefixes))
    missing = [
        f"{prefix}{i}.{mod}.lora_{x}.weight"
        for (i, mod), ab in sorted(parts.items())
        for x in "AB"
        if x not in ab
    ]
    if missing:
        raise ValueError(f"old_adapter is missing LoRA factors: {missing}")
    out: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}
    ranks = set()
    for (i, mod), ab in parts.items():
        if i >= n_layers:
            raise ValueError(
                f"old_adapter refers to layer {i} but the old model has {n_layers} layers"
            )
        out.setdefault(i, {})[mod] = (ab["B"], ab["A"])
        ranks.add(ab["A"].shape[0])
    if len(ranks) != 1:
        raise ValueError(f"old_adapter mixes LoRA ranks {sorted(ranks)}; one rank is supported")
    return prefix, out, ranks.pop()


def _layer_outputs(
    model: nn.Module, layers: Sequence[nn.Module], ids: torch.Tensor
) -> list[torch.Tensor]:
    acts: list[torch.Tensor] = []
    hooks = [
        layer.register_forward_hook(
            lambda _m, _i, out: acts.append((out[0] if isinstance(out, tuple) else out).detach())
        )
        for layer in layers
    ]
    try:
        with torch.no_grad():
            model(input_ids=ids.to(next(model.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
    return [a.reshape(-1, a.shape[-1]).float().cpu() for a in acts]


def transfer_lora(
    old_model: nn.Module,
    new_model: nn.Module,
    old_adapter: Mapping[str, torch.Tensor] | str | Path,
    *,
    vocab_old: Mapping[str, int],
    vocab_new: Mapping[str, int],
    calib_input_ids: torch.Tensor,
    config: LoRASuiteConfig | None = None,
    lora_alpha: float | None = None,
    layers: Callable[[nn.Module], Sequence[nn.Module]] | None = None,
) -> tuple[dict[str, torch.Tensor], TransferReport]:
    """Transfer a peft LoRA of ``old_model`` to ``new_model`` (both base models, without adapters).

    ``old_adapter``: a peft LoRA state dict or a directory written by ``save_pretrained``
    (``lora_alpha`` is read from its config, else from the argument, else = r). ``calib_input_ids``
    are **old-vocabulary** ids; they are re-tokenised for the new model through the token strings.
    ``layers`` returns a model's decoder layers when they are not at ``model.model.layers``.
    Returns the new peft LoRA state dict (same key format, layers renumbered) and a
    :class:`TransferReport` whose ``lora_config`` loads it.
    """
    from peft import LoraConfig

    config = config or LoRASuiteConfig()
    old_layers, new_layers = _decoder_layers(old_model, layers), _decoder_layers(new_model, layers)
    if len(old_layers) > len(new_layers):
        raise ValueError(
            f"the old model has more layers ({len(old_layers)}) than the new one ({len(new_layers)}); "
            "LoRASuite maps every old layer to a distinct new layer"
        )
    heads_old, heads_new = _head_counts(old_model), _head_counts(new_model)
    if heads_old[0] > heads_new[0]:
        raise ValueError(
            f"the old model has more attention heads ({heads_old[0]}) than the new one ({heads_new[0]})"
        )
    state, alpha = _read_adapter(old_adapter, lora_alpha)
    prefix, factors, rank = _parse_adapter(state, len(old_layers))
    ids = _check_calibration(calib_input_ids, old_model, vocab_old, vocab_new, config.calib_batch)
    E_old = old_model.get_input_embeddings().weight
    E_new = new_model.get_input_embeddings().weight
    if config.transfer_matrix == "identity":
        if E_old.shape[1] != E_new.shape[1]:
            raise ValueError("transfer_matrix='identity' needs equal hidden sizes")
        W_x = torch.eye(E_old.shape[1])
    else:
        W_x = embedding_transfer_matrix(E_old, E_new, vocab_old, vocab_new)

    cka = None
    if config.layer_method == "identity":
        layer_map = list(range(len(old_layers)))
    else:
        acts_old = _layer_outputs(old_model, old_layers, ids)
        acts_new = _layer_outputs(new_model, new_layers, _translate(ids, vocab_old, vocab_new))
        cka = np.array([[linear_cka(x, y) for y in acts_new] for x in acts_old])
        layer_map = [int(j) for j in monotone_layer_alignment(cka)]

    report = TransferReport(
        lora_config=None,
        transfer_matrix=W_x,
        layer_map=layer_map,
        cka=cka,
        common_tokens=len(set(vocab_old) & set(vocab_new)),
    )
    new_state: dict[str, torch.Tensor] = {}
    for i, modules in sorted(factors.items()):
        j = layer_map[i]
        old_l, new_l = old_layers[i], new_layers[j]
        for mod in modules:
            w = _submodule(old_l, mod).weight
            if rank > min(w.shape):
                raise ValueError(
                    f"LoRA rank {rank} exceeds min(out, in) = {min(w.shape)} of layer {i} {mod}"
                )
        attn = {
            mod.split(".")[1]: B @ A
            for mod, (B, A) in modules.items()
            if mod.startswith("self_attn")
        }
        if attn:
            old_w = AttentionWeights.from_module(old_l.self_attn, *heads_old)
            new_w = AttentionWeights.from_module(new_l.self_attn, *heads_new)
            report.head_similarity[i] = head_similarity(old_w, new_w, W_x)
            report.head_maps[i] = head_alignment(old_w, new_w, W_x)
            for name, delta in _attention_deltas(
                old_w, new_w, attn, W_x, report.head_maps[i], config.head_transform
            ).items():
                _put(new_state, prefix, j, f"self_attn.{name}", *_low_rank(delta, rank))
        for mod, (B, A) in modules.items():
            if mod.startswith("mlp"):
                name = mod.split(".")[1]
                W_old = _submodule(old_l, mod).weight.detach().float().cpu()
                W_new = _submodule(new_l, mod).weight.detach().float().cpu()
                _put(new_state, prefix, j, mod, *_mlp_factors(name, B, A, W_old, W_new, W_x))
    targets = sorted({mod.split(".")[1] for modules in factors.values() for mod in modules})
    report.lora_config = LoraConfig(
        r=rank, lora_alpha=alpha if alpha is not None else rank, target_modules=targets
    )
    report.transferred_modules = sorted({k.rsplit(".lora_", 1)[0] for k in new_state})
    return new_state, report


def _submodule(layer: nn.Module, path: str) -> nn.Linear:
    module = layer.get_submodule(path)
    if not isinstance(module, nn.Linear):
        raise TypeError(
            f"{path} of {type(layer).__name__} is {type(module).__name__}, not nn.Linear"
        )
    return module


def _put(
    state: dict, prefix: str, layer: int, module: str, B: torch.Tensor, A: torch.Tensor
) -> None:
    state[f"{prefix}{layer}.{module}.lora_A.weight"] = A.contiguous()
    state[f"{prefix}{layer}.{module}.lora_B.weight"] = B.contiguous()


def _check_calibration(
    ids: Any,
    model: nn.Module,
    vocab_old: Mapping[str, int],
    vocab_new: Mapping[str, int],
    batch: int,
) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
        raise TypeError("calib_input_ids must be an integer torch tensor (batch, seq)")
    if ids.ndim != 2 or ids.numel() == 0:
        raise ValueError(
            f"calib_input_ids must be a non-empty (batch, seq) tensor, got {tuple(ids.shape)}"
        )
    rows = model.get_input_embeddings().weight.shape[0]
    if int(ids.min()) < 0 or int(ids.max()) >= rows:
        raise ValueError(f"calib_input_ids must lie in [0, {rows}) (old embedding rows)")
    _translate(ids, vocab_old, vocab_new)  # every id must name a token known to both models
    return ids[:batch].long()


def _translate(
    ids: torch.Tensor, vocab_old: Mapping[str, int], vocab_new: Mapping[str, int]
) -> torch.Tensor:
    """Old-vocabulary ids → new-vocabulary ids of the same token strings."""
    inverse = {i: t for t, i in vocab_old.items()}
    table = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long)
    for i in ids.unique().tolist():
        tok = inverse.get(i)
        if tok is None or tok not in vocab_new:
            raise ValueError(
                f"calib_input_ids contains id {i} ({tok!r}) that is not a token of both vocabularies"
            )
        table[i] = vocab_new[tok]
    return table[ids.long().cpu()]


# ------------------------------------------------------------------------------------------------
# 5: LFT set-up


def prepare_lft_model(model: nn.Module, lora_state: Mapping[str, torch.Tensor], lora_config: Any):
    """A peft LoRA model on ``model`` loaded with the transferred weights; LoRA modules that received
    no weights get A = B = 0 and are frozen (spec / official LFT). Returns the ``PeftModel``."""
    from peft import get_peft_model, set_peft_model_state_dict
    from peft.tuners.lora import LoraLayer

    with peft_deprecations_silenced():
        peft_model = get_peft_model(model, lora_config)
    result = set_peft_model_state_dict(peft_model, dict(lora_state))
    if result.unexpected_keys:
        raise ValueError(
            f"transferred weights do not fit the new model: {result.unexpected_keys[:8]}"
        )

    def strip(key: str) -> str:
        return key.split("base_model.model.", 1)[-1]

    loaded = {strip(k.rsplit(".lora_", 1)[0]) for k in lora_state}
    for name, module in peft_model.named_modules():
        if isinstance(module, LoraLayer) and strip(name) not in loaded:
            with torch.no_grad():
                for factor in (module.lora_A["default"], module.lora_B["default"]):
                    factor.weight.zero_()
                    factor.weight.requires_grad_(False)
    return peft_model


# ------------------------------------------------------------------------------------------------
# a new version derived from an old model by a known transformation (tests and reproduction)


@dataclass
class UpdateTruth:
    """The transformation :func:`derive_updated_model` applied: the residual map ``rotation``
    (W_x, d_old × d_new with orthonormal rows: a rotation when the width is kept), old head a →
    new head ``head_perms[i][a]`` in old layer i, old layer i → new ``layer_map[i]``, the new-model
    indices of the inserted layers (``inserted_layer``: the first, or None) and the token-id
    permutation (old id t → new id ``vocab_permutation[t]``; None when the ids are kept)."""

    rotation: torch.Tensor
    head_perms: dict[int, np.ndarray]
    layer_map: list[int]
    inserted_layer: int | None
    inserted_layers: tuple[int, ...] = ()
    vocab_permutation: torch.Tensor | None = None

    def new_vocab(self, vocab_old: Mapping[str, int]) -> dict[str, int]:
        """The new model's vocabulary (token string → new id) from the old one's."""
        if self.vocab_permutation is None:
            return dict(vocab_old)
        n = len(self.vocab_permutation)
        bad = [t for t, i in vocab_old.items() if not 0 <= i < n]
        if bad:
            raise ValueError(f"vocab_old has ids outside [0, {n}): {bad[:8]}")
        return {t: int(self.vocab_permutation[i]) for t, i in vocab_old.items()}


def _random_orthogonal(d: int, gen: torch.Generator) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).float()


def _insert_positions(insert_layer_at: int | Sequence[int] | None, n_old: int) -> list[int]:
    if insert_layer_at is None:
        return []
    if isinstance(insert_layer_at, int):
        positions = [insert_layer_at]
    elif isinstance(insert_layer_at, Sequence) and not isinstance(insert_layer_at, str):
        positions = list(insert_layer_at)
    else:
        positions = [insert_layer_at]  # rejected below
    for p in positions:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(
                f"insert_layer_at must be an int, a sequence of ints or None, got {insert_layer_at!r}"
            )
        if not 0 <= p <= n_old:
            raise ValueError(f"insert_layer_at must lie in [0, {n_old}], got {p}")
    return sorted(positions)


@torch.no_grad()
def derive_updated_model(
    old_model: nn.Module,
    *,
    seed: int = 0,
    rotate: bool = True,
    permute_heads: bool = True,
    insert_layer_at: int | Sequence[int] | None = 1,
    insert_scale: float = 0.1,
    hidden_size: int | None = None,
    permute_vocab: bool = False,
) -> tuple[nn.Module, UpdateTruth]:
    """A Llama/Qwen2-style "new version" of ``old_model`` by a known transformation (spec):
    fold the RMSNorm weights into the next linear layers, map the residual stream by W_x (E,
    lm_head and input-side weights × W_x; o/down: W_xᵀ ×), permute the heads of every layer (whole
    key/value groups with grouped-query attention), and insert randomly initialised layers with
    their o/down weights × ``insert_scale``.

    ``rotate``: W_x is a random orthogonal map (else the identity, or [I 0] when widening).
    ``insert_layer_at``: old-model positions p ∈ [0, n_old]; a new layer is inserted before old
    layer p (p = n_old: at the end), one per entry (repeats insert several at one place); None
    inserts nothing. ``hidden_size``: the new width d_new ≥ d_old (default: kept); W_x then has
    orthonormal rows, the input-side weights carry √(d_old/d_new) and the RMSNorm ε is scaled by
    d_old/d_new, so the map stays exact (heads keep their number and size). ``permute_vocab``:
    the new model's token ids are a random permutation of the old ones (``UpdateTruth.new_vocab``
    gives the vocabulary to pass to :func:`transfer_lora`).

    Without insertions the new model computes exactly the old function (up to float error).
    """
    import copy

    old_layers = _decoder_layers(old_model, None)
    heads, kv_heads = _head_counts(old_model)
    cfg = copy.deepcopy(old_model.config)
    n_old = len(old_layers)
    positions = _insert_positions(insert_layer_at, n_old)
    check_positive("insert_scale", insert_scale, strict=False)
    d = cfg.hidden_size
    d_new = d if hidden_size is None else hidden_size
    check_positive("hidden_size", d_new, integer=True)
    if d_new < d:
        raise ValueError(
            f"hidden_size must be >= the old hidden size {d} (a narrower model cannot compute the "
            f"old function exactly), got {d_new}"
        )
    tied = old_model.get_output_embeddings().weight is old_model.get_input_embeddings().weight
    if d_new != d and tied:
        raise ValueError(
            "widening a model with tied input/output embeddings is not supported: the LM head "
            "would need a different scale from the embedding"
        )
    hd = old_layers[0].self_attn.q_proj.out_features // heads
    cfg.num_hidden_layers = n_old + len(positions)
    if getattr(cfg, "layer_types", None) is not None:
        cfg.layer_types = [cfg.layer_types[0]] * cfg.num_hidden_layers
    if d_new != d:
        cfg.hidden_size = d_new
        cfg.head_dim = hd  # heads keep their size (the default head_dim would grow)
        cfg.rms_norm_eps = cfg.rms_norm_eps * d / d_new
    gen = torch.Generator().manual_seed(seed)
    with seeded(seed):
        new_model = type(old_model)(cfg).float().eval()
    if d_new == d:
        Q = _random_orthogonal(d, gen) if rotate else torch.eye(d)
    else:
        Q = (_random_orthogonal(d_new, gen) if rotate else torch.eye(d_new))[:d]
    scale = math.sqrt(d / d_new)  # undoes the RMSNorm's √(d_new/d_old) on a widened stream

    def fold(w: torch.Tensor) -> torch.Tensor:
        return w @ Q if d_new == d else (w @ Q) * scale

    # old layer i → new i + (number of insertions before it)
    layer_map = [i + sum(p <= i for p in positions) for i in range(n_old)]
    inserted = sorted(set(range(cfg.num_hidden_layers)) - set(layer_map))
    new_layers = _decoder_layers(new_model, None)
    n_rep = heads // kv_heads
    perms: dict[int, np.ndarray] = {}
    for i, old_l in enumerate(old_layers):
        new_l = new_layers[layer_map[i]]
        kv_perm = (
            torch.randperm(kv_heads, generator=gen) if permute_heads else torch.arange(kv_heads)
        )
        q_perm = (kv_perm[:, None] * n_rep + torch.arange(n_rep)).reshape(
            -1
        )  # old head g·n+k → new
        perms[i] = q_perm.numpy()
        w_in = old_l.input_layernorm.weight.float()
        w_post = old_l.post_attention_layernorm.weight.float()
        for name, norm_w, rows in (
            ("q_proj", w_in, q_perm),
            ("k_proj", w_in, kv_perm),
            ("v_proj", w_in, kv_perm),
        ):
            src, dst = getattr(old_l.self_attn, name), getattr(new_l.self_attn, name)
            w = fold(src.weight.float() * norm_w)
            dst.weight.copy_(_permute_blocks(w, rows, hd, dim=0))
            if src.bias is not None:
                dst.bias.copy_(_permute_blocks(src.bias.float()[:, None], rows, hd, dim=0)[:, 0])
        o_src, o_dst = old_l.self_attn.o_proj, new_l.self_attn.o_proj
        o_dst.weight.copy_(_permute_blocks(Q.t() @ o_src.weight.float(), q_perm, hd, dim=1))
        if o_src.bias is not None:
            o_dst.bias.copy_(Q.t() @ o_src.bias.float())
        for name in ("gate_proj", "up_proj"):
            getattr(new_l.mlp, name).weight.copy_(
                fold(getattr(old_l.mlp, name).weight.float() * w_post)
            )
        new_l.mlp.down_proj.weight.copy_(Q.t() @ old_l.mlp.down_proj.weight.float())
        new_l.input_layernorm.weight.fill_(1.0)
        new_l.post_attention_layernorm.weight.fill_(1.0)
    for j in inserted:
        new_layers[j].self_attn.o_proj.weight.mul_(insert_scale)
        new_layers[j].mlp.down_proj.weight.mul_(insert_scale)
    vocab = old_model.get_input_embeddings().weight.shape[0]
    # drawn last, so the other draws (and the defaults' results) do not depend on it
    perm = torch.randperm(vocab, generator=gen) if permute_vocab else None

    def to_new_ids(w: torch.Tensor) -> torch.Tensor:
        if perm is None:
            return w
        out = torch.empty_like(w)
        out[perm] = w  # old token t sits at row perm[t] of the new model
        return out

    new_model.get_input_embeddings().weight.copy_(
        to_new_ids(old_model.get_input_embeddings().weight.float() @ Q)
    )
    final_norm = old_model.model.norm.weight.float()
    new_model.model.norm.weight.fill_(1.0)
    head_old, head_new = old_model.get_output_embeddings(), new_model.get_output_embeddings()
    head_new.weight.copy_(to_new_ids(fold(head_old.weight.float() * final_norm)))
    if getattr(head_old, "bias", None) is not None:
        head_new.bias.copy_(to_new_ids(head_old.bias.float()[:, None])[:, 0])
    truth = UpdateTruth(
        rotation=Q,
        head_perms=perms,
        layer_map=layer_map,
        inserted_layer=inserted[0] if inserted else None,
        inserted_layers=tuple(inserted),
        vocab_permutation=perm,
    )
    return new_model, truth


def _permute_blocks(w: torch.Tensor, perm: torch.Tensor, block: int, dim: int) -> torch.Tensor:
    """Move block a of ``w`` (along ``dim``) to position ``perm[a]``."""
    out = torch.empty_like(w)
    for a, b in enumerate(perm.tolist()):
        src = slice(a * block, (a + 1) * block)
        dst = slice(b * block, (b + 1) * block)
        if dim == 0:
            out[dst] = w[src]
        else:
            out[:, dst] = w[:, src]
    return out

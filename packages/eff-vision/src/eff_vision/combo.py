"""ComBo: probing combined features of several frozen backbones (and layers) with compressed tokens.

Ramtoula, Lajoie, Newman, De Martini, "Fantastic Features and Where to Find Them: A Probing Method
to combine Features from Multiple Foundation Models", NeurIPS 2025, arXiv 2512.01405 (project page
bramtoula.github.io/combo). **No official code was found**: this module follows the abstract, the
project page and the spec's reading of them.

Method (spec, "ComBo → Algorithm"):

1. :class:`MultiBackboneFeatures` extracts feature maps F_{k,l} ∈ R^{T_k×D_k} from chosen layers l of K
   frozen models with forward hooks, under ``torch.no_grad`` and with every backbone in ``eval()``
   mode (the backbones never receive gradients and their buffers never change), **resamples** every
   map to one common token grid T ("feature-map alignment": area interpolation when shrinking,
   bilinear when enlarging; ViT tokens drop their ``num_prefix_tokens`` and are reshaped to their
   square grid), optionally LayerNorms each map over its channels, and concatenates the maps along
   channels per token → R^{T×ΣD}.
2. :class:`ComBo` compresses every token with **one shared affine projection** ΣD → d (token-wise
   compression), prepends a CLS token, adds learned positions, runs a light transformer (pre-norm,
   ``depth`` layers) and classifies from the CLS output. One fixed recipe for every task
   (:func:`fit_probe`: AdamW 3e-3, weight decay 1e-4, 60 epochs, batch 32).
3. **Backbone relevance** (:meth:`ComBo.backbone_importance`): the Frobenius norm of the projection
   weights on model k's input columns divided by sqrt(number of those columns);
   :func:`select_backbones` keeps the top k ("selective adaptation": re-train ComBo on them).

Baselines (:class:`LinearProbe`): a linear probe on the mean-pooled tokens of one (model, layer) map,
and the pooled concat-all linear probe on the mean-pooled tokens of every map.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_choice, check_positive
from eff_shared.progress import track
from eff_shared.torch import seeded

__all__ = [
    "ComBo",
    "ConstantDecoy",
    "DecoyBackbone",
    "LinearProbe",
    "MultiBackboneFeatures",
    "NoiseDecoy",
    "evaluate_probe",
    "fit_probe",
    "load_features",
    "resample_grid",
    "select_backbones",
    "select_columns",
]


def _available(module: nn.Module) -> str:
    names = [n for n, _ in module.named_modules() if n]
    return ", ".join(names) if names else "(no submodules)"


def _capture_hook(layer: str, captured: dict, grad_flags: list):
    def hook(_module, _inputs, out) -> None:
        captured[layer] = out
        grad_flags.append(torch.is_grad_enabled())

    return hook


def resample_grid(grid_map: Tensor, grid: tuple[int, int]) -> Tensor:
    """(B, C, H, W) → (B, gh·gw, C): area interpolation to shrink, bilinear to enlarge."""
    h, w = grid_map.shape[-2:]
    if (h, w) != tuple(grid):
        shrink = h >= grid[0] and w >= grid[1]
        if shrink:
            grid_map = F.interpolate(grid_map, size=grid, mode="area")
        else:
            grid_map = F.interpolate(grid_map, size=grid, mode="bilinear", align_corners=False)
    return grid_map.flatten(2).transpose(1, 2)


class MultiBackboneFeatures(nn.Module):
    """Frozen multi-backbone, multi-layer token extractor (forward hooks, ``torch.no_grad``).

    ``backbones``: ``{name: nn.Module}``; ``layers``: ``{name: [module names inside that backbone]}``
    (``dict(backbone.named_modules())`` keys, e.g. timm's ``"blocks.5"`` or a CNN's ``"layer2"``).
    ``grid``: the common token grid, or ``None`` to reduce every map to one token (CLS-only or pooled
    outputs). ``forward(x)`` takes one batch for all backbones or ``{name: batch}`` when backbones
    need different preprocessing; it returns ``[B, T, ΣD]`` with the maps concatenated in the order
    of ``backbones`` then ``layers``. After the first call, ``in_dims`` (channels per backbone),
    ``columns`` (column slice per backbone) and ``map_columns`` (per ``(backbone, layer)``) are set.

    The backbones are frozen here: ``requires_grad_(False)`` and ``eval()`` at every call.
    """

    def __init__(
        self,
        backbones: Mapping[str, nn.Module],
        layers: Mapping[str, list[str]],
        grid: tuple[int, int] | None = (14, 14),
        normalize: Literal["layernorm"] | None = "layernorm",
    ) -> None:
        super().__init__()
        if not isinstance(backbones, Mapping) or not backbones:
            raise ValueError("backbones must be a non-empty dict {name: nn.Module}")
        check_choice("normalize", normalize, ["layernorm", None])
        if grid is not None:
            if len(tuple(grid)) != 2 or any(
                isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in grid
            ):
                raise ValueError(f"grid must be a pair of positive ints or None, got {grid!r}")
            grid = (int(grid[0]), int(grid[1]))
        missing = [n for n in backbones if n not in layers]
        if missing:
            raise KeyError(
                f"layers has no entry for backbones {missing}; available backbones: {list(backbones)}"
            )
        self.backbones = nn.ModuleDict(dict(backbones))
        self.layers = {n: list(layers[n]) for n in backbones}
        self.grid = grid
        self.normalize = normalize
        self._hooked: dict[str, dict[str, nn.Module]] = {}
        for name, model in self.backbones.items():
            mods = dict(model.named_modules())
            if not self.layers[name]:
                raise ValueError(f"layers[{name!r}] must name at least one layer")
            for layer in self.layers[name]:
                if layer not in mods or layer == "":
                    raise KeyError(
                        f"layer {layer!r} not found in backbone {name!r}; available names: {_available(model)}"
                    )
            self._hooked[name] = {layer: mods[layer] for layer in self.layers[name]}
            model.requires_grad_(False)
        self.in_dims: dict[str, int] = {}
        self.columns: dict[str, slice] = {}
        self.map_columns: dict[tuple[str, str], slice] = {}
        self.grad_enabled_in_backbones: bool | None = None

    def _tokens(self, name: str, layer: str, out, batch: int) -> Tensor:
        if isinstance(out, (tuple, list)):
            out = out[0]
        if not isinstance(out, Tensor):
            raise TypeError(
                f"layer {layer!r} of {name!r} returned {type(out).__name__}, expected a tensor"
            )
        if out.shape[0] != batch:
            raise ValueError(
                f"mismatched batch sizes across backbones: {name!r}.{layer} gave {out.shape[0]}, expected {batch}"
            )
        if out.ndim == 4:
            tok = out.mean((2, 3))[:, None] if self.grid is None else resample_grid(out, self.grid)
        elif out.ndim == 3:
            prefix = int(getattr(self.backbones[name], "num_prefix_tokens", 0))
            if self.grid is None:
                tok = out.mean(1, keepdim=True)
            else:
                patches = out[:, prefix:]
                side = math.isqrt(patches.shape[1])
                if side * side != patches.shape[1] or side == 0:
                    raise ValueError(
                        f"{name!r}.{layer} gives {out.shape[1]} tokens ({prefix} prefix), not a 2-D grid; "
                        "pass grid=None for CLS-only / non-grid outputs"
                    )
                grid_map = patches.transpose(1, 2).reshape(batch, -1, side, side)
                tok = resample_grid(grid_map, self.grid)
        elif out.ndim == 2:
            if self.grid is not None:
                raise ValueError(
                    f"{name!r}.{layer} gives a {tuple(out.shape)} output (no token grid, e.g. CLS-only); "
                    "pass grid=None explicitly"
                )
            tok = out[:, None]
        else:
            raise ValueError(
                f"{name!r}.{layer} gives a {out.ndim}-D output; expected 2-D, 3-D or 4-D"
            )
        tok = tok.float() if not tok.is_floating_point() else tok
        if self.normalize == "layernorm":
            tok = F.layer_norm(tok, tok.shape[-1:])
        return tok

    def forward(self, x: Tensor | Mapping[str, Tensor]) -> Tensor:
        inputs = {n: (x[n] if isinstance(x, Mapping) else x) for n in self.backbones}
        if isinstance(x, Mapping):
            missing = [n for n in self.backbones if n not in x]
            if missing:
                raise KeyError(f"no input for backbones {missing}; inputs given: {list(x)}")
        batches = {n: int(v.shape[0]) for n, v in inputs.items()}
        if len(set(batches.values())) != 1:
            raise ValueError(f"mismatched batch sizes across backbones: {batches}")
        batch = next(iter(batches.values()))
        maps: list[Tensor] = []
        in_dims: dict[str, int] = {}
        map_dims: list[tuple[str, str, int]] = []
        grad_flags: list[bool] = []
        with torch.no_grad():
            for name, model in self.backbones.items():
                captured: dict[str, object] = {}
                handles = [
                    m.register_forward_hook(_capture_hook(layer, captured, grad_flags))
                    for layer, m in self._hooked[name].items()
                ]
                model.eval()
                try:
                    model(inputs[name])
                finally:
                    for h in handles:
                        h.remove()
                in_dims[name] = 0
                for layer in self.layers[name]:
                    tok = self._tokens(name, layer, captured[layer], batch)
                    maps.append(tok)
                    in_dims[name] += tok.shape[-1]
                    map_dims.append((name, layer, tok.shape[-1]))
        self.grad_enabled_in_backbones = any(grad_flags)
        n_tok = {m.shape[1] for m in maps}
        if len(n_tok) != 1:
            raise ValueError(
                f"token counts differ across maps ({sorted(n_tok)}); set a common grid"
            )
        self.in_dims = in_dims
        self.columns, start = {}, 0
        for name, d in in_dims.items():
            self.columns[name] = slice(start, start + d)
            start += d
        self.map_columns, start = {}, 0
        for name, layer, d in map_dims:
            self.map_columns[(name, layer)] = slice(start, start + d)
            start += d
        return torch.cat(maps, dim=-1)

    @torch.no_grad()
    def extract(self, x: Tensor | Mapping[str, Tensor], batch_size: int = 256) -> Tensor:
        """``forward`` in chunks of ``batch_size`` images (one tensor input)."""
        if isinstance(x, Mapping):
            return self(x)
        return torch.cat([self(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])

    def precompute(self, loader: Iterable, path: str | Path) -> None:
        """Cache the tokens of every batch of ``loader`` (tensors or ``(x, y, ...)`` tuples) as ``.npz``.

        Stores ``tokens`` [N, T, ΣD] (float32), ``labels`` when the batches carry them, and the column
        layout; read it back with :func:`load_features`. Memory: T·ΣD floats per image.
        """
        toks, labels = [], []
        for batch in loader:
            xb = batch[0] if isinstance(batch, (tuple, list)) else batch
            toks.append(self(xb).float().cpu())
            if isinstance(batch, (tuple, list)) and len(batch) > 1:
                labels.append(torch.as_tensor(batch[1]).cpu())
        if not toks:
            raise ValueError("loader yielded no batches")
        payload = {
            "tokens": torch.cat(toks).numpy(),
            "names": np.array(list(self.in_dims)),
            "dims": np.array(list(self.in_dims.values()), dtype=np.int64),
        }
        if labels:
            payload["labels"] = torch.cat(labels).numpy()
        np.savez(Path(path), **payload)


def load_features(path: str | Path) -> dict:
    """Read a :meth:`MultiBackboneFeatures.precompute` cache: ``tokens``, ``labels``, ``in_dims``."""
    with np.load(Path(path), allow_pickle=False) as f:
        out = {
            "tokens": torch.from_numpy(f["tokens"].copy()),
            "in_dims": {str(n): int(d) for n, d in zip(f["names"], f["dims"], strict=True)},
        }
        if "labels" in f:
            out["labels"] = torch.from_numpy(f["labels"].copy())
    return out


class NoiseDecoy(nn.Module):
    """A decoy "backbone" whose output is input-independent Gaussian noise [B, C, H, W] (seeded stream).

    Its single layer is ``"out"``; used to check that backbone relevance ranks it last.
    """

    def __init__(self, channels: int = 32, grid: tuple[int, int] = (4, 4), seed: int = 0) -> None:
        super().__init__()
        check_positive("channels", channels, integer=True)
        self.channels, self.grid_size = channels, tuple(grid)
        self.gen = torch.Generator().manual_seed(seed)
        self.out = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        noise = torch.randn((x.shape[0], self.channels, *self.grid_size), generator=self.gen)
        return self.out(
            noise.to(device=x.device, dtype=x.dtype if x.is_floating_point() else torch.float32)
        )


class ConstantDecoy(nn.Module):
    """A decoy "backbone" whose output is one constant image [C, H, W] for every input.

    The image is drawn once from N(0, 1) with ``seed`` (a value constant over channels would be
    erased by the per-token LayerNorm of :class:`MultiBackboneFeatures`); it carries no information
    about the input. Its single layer is ``"out"``.
    """

    def __init__(self, channels: int = 32, grid: tuple[int, int] = (4, 4), seed: int = 0) -> None:
        super().__init__()
        check_positive("channels", channels, integer=True)
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("image", torch.randn((channels, *tuple(grid)), generator=gen))
        self.out = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype if x.is_floating_point() else torch.float32
        image = self.image.to(device=x.device, dtype=dtype)
        return self.out(image.expand(x.shape[0], *image.shape))


class DecoyBackbone(nn.Module):
    """A user's decoy as a backbone: ``fn(x) -> Tensor`` (a function or an ``nn.Module``, frozen
    like every backbone) whose output ([B, C, H, W], [B, T, D], or [B, D] with ``grid=None``) is
    the single hookable layer ``"out"``."""

    def __init__(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(
                f"fn must be callable (a function or nn.Module), got {type(fn).__name__}"
            )
        self.fn = fn
        self.out = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.fn(x))


def select_columns(
    tokens: Tensor, in_dims: Mapping[str, int], names: Iterable[str]
) -> tuple[Tensor, dict[str, int]]:
    """The columns of ``tokens`` belonging to ``names`` (in ``in_dims`` order) and their ``in_dims``."""
    names = list(names)
    unknown = [n for n in names if n not in in_dims]
    if unknown:
        raise KeyError(f"unknown backbones {unknown}; available: {list(in_dims)}")
    cols, dims, start = [], {}, 0
    for n, d in in_dims.items():
        if n in names:
            cols.append(tokens[..., start : start + d])
            dims[n] = d
        start += d
    if start != tokens.shape[-1]:
        raise ValueError(f"in_dims sum to {start} but tokens have {tokens.shape[-1]} columns")
    return torch.cat(cols, dim=-1), dims


class ComBo(nn.Module):
    """ComBo probe: shared token-wise projection ΣD → d, CLS token, learned positions, light
    transformer (pre-norm), linear head on the CLS output (spec "ComBo → Algorithm").

    ``in_dims``: ``{backbone: channels}`` in the column order of the tokens (as produced by
    :class:`MultiBackboneFeatures`); ``num_tokens``: the token-grid size T.
    """

    def __init__(
        self,
        in_dims: Mapping[str, int],
        num_classes: int,
        d_model: int = 32,
        depth: int = 1,
        heads: int = 2,
        *,
        num_tokens: int = 16,
        dim_feedforward: int = 64,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        if not isinstance(in_dims, Mapping) or not in_dims:
            raise ValueError("in_dims must be a non-empty dict {backbone: channels}")
        for name, d in in_dims.items():
            check_positive(f"in_dims[{name!r}]", d, integer=True)
        for name, v in (("num_classes", num_classes), ("d_model", d_model), ("depth", depth), ("heads", heads),
                        ("num_tokens", num_tokens), ("dim_feedforward", dim_feedforward)):  # fmt: skip
            check_positive(name, v, integer=True)
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by heads ({heads})")
        self.in_dims = dict(in_dims)
        self.num_tokens = num_tokens
        self.proj = nn.Linear(sum(self.in_dims.values()), d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.randn(1, num_tokens + 1, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model,
            heads,
            dim_feedforward,
            dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        if (
            tokens.ndim != 3
            or tokens.shape[1] != self.num_tokens
            or tokens.shape[2] != self.proj.in_features
        ):
            raise ValueError(
                f"tokens must be [B, {self.num_tokens}, {self.proj.in_features}], got {tuple(tokens.shape)}"
            )
        z = self.proj(tokens)
        z = torch.cat([self.cls_token.expand(len(z), -1, -1), z], dim=1) + self.pos_embed
        z = self.norm(self.encoder(z))
        return self.head(z[:, 0])

    def backbone_importance(self) -> dict[str, float]:
        """``{backbone: ‖W[:, cols_k]‖_F / sqrt(|cols_k|)}`` of the shared projection."""
        w = self.proj.weight.detach()
        out, start = {}, 0
        for name, d in self.in_dims.items():
            out[name] = float(w[:, start : start + d].norm() / math.sqrt(d))
            start += d
        return out


class LinearProbe(nn.Module):
    """Linear classifier on the mean over tokens of ``[B, T, D]`` (or on ``[B, D]`` directly)."""

    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.fc(tokens.mean(1) if tokens.ndim == 3 else tokens)


def select_backbones(importance: Mapping[str, float], k: int) -> list[str]:
    """The ``k`` most important backbones, most important first (ties keep the dict order)."""
    if not importance:
        raise ValueError("importance must not be empty")
    check_positive("k", k, integer=True)
    if k > len(importance):
        raise ValueError(f"k must be <= the number of backbones ({len(importance)}), got {k}")
    order = sorted(range(len(importance)), key=lambda i: -list(importance.values())[i])
    names = list(importance)
    return [names[i] for i in order[:k]]


def fit_probe(
    model: nn.Module,
    train_tokens: Tensor,
    train_labels: Tensor,
    *,
    epochs: int = 60,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    batch_size: int = 32,
    seed: int = 0,
    token_transform: Callable[[Tensor], Tensor] | None = None,
) -> list[float]:
    """Train a probe with AdamW and cross-entropy (seeded batch order and dropout); per-epoch loss.

    The tokens are detached: nothing upstream of them (the frozen backbones) can receive a gradient.
    ``token_transform(tokens)``, when given, is applied to all training tokens at the start of every
    epoch (augmentation, or re-drawing a decoy's noise instead of caching it).
    """
    check_positive("epochs", epochs, integer=True)
    check_positive("batch_size", batch_size, integer=True)
    check_positive("lr", lr)
    check_positive("weight_decay", weight_decay, strict=False)
    if len(train_tokens) != len(train_labels):
        raise ValueError(
            f"train_tokens ({len(train_tokens)}) and train_labels ({len(train_labels)}) differ in length"
        )
    x, y = train_tokens.detach(), train_labels.detach()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    history = []
    with seeded(seed):
        model.train()
        for _ in track(range(epochs), "ComBo training (epochs)"):
            total = 0.0
            xe = x if token_transform is None else token_transform(x).detach()
            for idx in torch.randperm(len(x), generator=gen).split(batch_size):
                loss = F.cross_entropy(model(xe[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
            history.append(total / len(x))
    model.eval()
    return history


@torch.no_grad()
def evaluate_probe(
    model: nn.Module, tokens: Tensor, labels: Tensor, batch_size: int = 512
) -> float:
    """Top-1 accuracy of ``model`` (eval mode)."""
    model.eval()
    correct = 0
    for i in range(0, len(tokens), batch_size):
        correct += int(
            (model(tokens[i : i + batch_size]).argmax(1) == labels[i : i + batch_size]).sum()
        )
    return correct / len(tokens)

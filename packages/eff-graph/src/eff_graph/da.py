"""Graph domain-adaptation baselines on PyG (PyG has no domain-adaptation module).

All share ImGDA's backbone and training setup so that comparisons isolate the adaptation method: a
``num_layers`` GCN stack (``GCNConv`` on ``D^{-1/2}(A + I)D^{-1/2}``) to ``hidden_channels``, a linear
classifier, Adam, full batch, last epoch reported, ``target.y`` never read.

* :class:`SourceOnlyGCN` — cross-entropy on the source only.
* :class:`ClassBalancedGCN` — cross-entropy re-weighted by inverse class frequency ``n / (C·n_c)``.
* :class:`DANNGCN` — DANN (Ganin et al., JMLR 2016) on node embeddings: a domain classifier behind a
  gradient-reversal layer of constant weight ``grl_weight`` (default 0.1; at 1 it collapsed in the
  spec's prototype).
* :class:`UDAGCN` — UDAGCN (Wu et al., WWW 2020; code ``TrustAGI-Lab/UDAGCN``): the GCN and a
  random-walk PPMI propagation share weights, an attention layer fuses the two outputs, a domain
  classifier (40 hidden units) trains behind gradient reversal with rate ``min((epoch+1)/epochs,
  0.05)``, and the target prediction entropy is added with weight ``0.01·epoch/epochs``. Differences
  from that code: our shared optimiser settings (its Adam lr 3e-3 and its ``3e-3·mean(weight)``
  term are not used) and PPMI walks of length ≤ ``ppmi_walk_len`` (default 10, as there).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from eff_graph._gnn import (
    GCNStack,
    OperatorCache,
    check_domain_pair,
    check_graph,
    gcn_operator,
    grad_reverse,
)
from eff_graph.imgda import ppmi_operator
from eff_shared.errors import check_positive, check_type
from eff_shared.torch import seeded

__all__ = ["DANNGCN", "UDAGCN", "ClassBalancedGCN", "GCNBaselineConfig", "SourceOnlyGCN"]


@dataclass(frozen=True)
class GCNBaselineConfig:
    """Backbone and optimiser of every baseline (the spec's reproduction settings by default)."""

    hidden_channels: int = 64
    num_layers: int = 2
    dropout: float = 0.1
    lr: float = 0.01
    weight_decay: float = 1e-3
    epochs: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_channels", "num_layers", "epochs"):
            check_positive(name, getattr(self, name), integer=True)
        check_type("dropout", self.dropout, (int, float))
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {self.dropout!r}")
        check_positive("lr", self.lr)
        check_positive("weight_decay", self.weight_decay, strict=False)
        check_positive("seed", self.seed, strict=False, integer=True)


class SourceOnlyGCN:
    """GCN trained with cross-entropy on the labelled source graph; ``fit`` ignores the target."""

    uses_target = False

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        config: GCNBaselineConfig | None = None,
        **overrides: Any,
    ) -> None:
        check_positive("in_channels", in_channels, integer=True)
        check_positive("num_classes", num_classes, integer=True)
        if num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        unknown = set(overrides) - {f.name for f in fields(GCNBaselineConfig)}
        if unknown:
            raise TypeError(f"unknown GCNBaselineConfig field(s): {sorted(unknown)}")
        self.config = replace(config or GCNBaselineConfig(), **overrides)
        self.in_channels, self.num_classes = in_channels, num_classes
        cfg = self.config
        with seeded(cfg.seed):
            self.encoder = GCNStack(in_channels, cfg.hidden_channels, cfg.num_layers, cfg.dropout)
            self.classifier = nn.Linear(cfg.hidden_channels, num_classes)
            self._build_extra()
        self._ops = OperatorCache(gcn_operator)
        self.history: list[dict[str, float]] = []

    # hooks for subclasses ---------------------------------------------------------------------
    def _build_extra(self) -> None:
        """Extra modules (created under the model seed)."""

    def _modules(self) -> list[nn.Module]:
        return [self.encoder, self.classifier]

    def _embed(self, data: Data) -> Tensor:
        return self.encoder(data.x, self._ops(data.edge_index, data.num_nodes))

    def _loss(self, source: Data, target: Data, epoch: int, epochs: int) -> dict[str, Tensor]:
        return {"ce": F.cross_entropy(self.classifier(self._embed(source)), source.y)}

    # public API -------------------------------------------------------------------------------
    def fit(self, source: Data, target: Data | None = None, epochs: int | None = None) -> Any:
        """Train for ``epochs`` (default ``config.epochs``) full-batch epochs; returns ``self``.
        ``target`` (unlabelled; ``target.y`` is never read) is required by the adapting baselines."""
        if target is None:
            if self.uses_target:
                raise ValueError(f"{type(self).__name__}.fit needs the unlabelled target graph")
            check_graph(source, "source", self.num_classes, need_y=True)
        else:
            check_domain_pair(source, target, self.num_classes)
        if source.x.size(1) != self.in_channels:
            raise ValueError(
                f"source has {source.x.size(1)} features, the model was built for {self.in_channels}"
            )
        cfg = self.config
        epochs = cfg.epochs if epochs is None else epochs
        check_positive("epochs", epochs, integer=True)
        dev = source.x.device
        for m in self._modules():
            m.to(dev).train()
        params = [p for m in self._modules() for p in m.parameters()]
        with seeded(cfg.seed + 1):
            opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
            for epoch in range(epochs):
                terms = self._loss(source, target, epoch, epochs)  # type: ignore[arg-type]
                loss = sum(terms.values())
                opt.zero_grad()
                loss.backward()  # type: ignore[union-attr]
                opt.step()
                self.history.append({k: float(v.detach()) for k, v in terms.items()})
        return self

    @torch.no_grad()
    def predict(self, target: Data) -> Tensor:
        """Class predictions for every node of ``target``."""
        check_graph(target, "target")
        if target.x.size(1) != self.in_channels:
            raise ValueError(
                f"target has {target.x.size(1)} features, the model was built for {self.in_channels}"
            )
        for m in self._modules():
            m.eval()
        out = self.classifier(self._embed(target)).argmax(1)
        for m in self._modules():
            m.train()
        return out


class ClassBalancedGCN(SourceOnlyGCN):
    """Source-only GCN with cross-entropy weighted by ``n / (C·n_c)`` (inverse class frequency)."""

    def _loss(self, source: Data, target: Data, epoch: int, epochs: int) -> dict[str, Tensor]:
        counts = torch.bincount(source.y, minlength=self.num_classes).to(source.x.dtype)
        weight = counts.sum() / (self.num_classes * counts.clamp_min(1))
        logits = self.classifier(self._embed(source))
        return {"ce": F.cross_entropy(logits, source.y, weight=weight)}


class DANNGCN(SourceOnlyGCN):
    """GCN + domain classifier behind gradient reversal of weight ``grl_weight`` (DANN)."""

    uses_target = True

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        config: GCNBaselineConfig | None = None,
        grl_weight: float = 0.1,
        **overrides: Any,
    ) -> None:
        check_positive("grl_weight", grl_weight, strict=False)
        self.grl_weight = float(grl_weight)
        super().__init__(in_channels, num_classes, config, **overrides)

    def _build_extra(self) -> None:
        h = self.config.hidden_channels
        self.domain = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))

    def _modules(self) -> list[nn.Module]:
        return [*super()._modules(), self.domain]

    def _loss(self, source: Data, target: Data, epoch: int, epochs: int) -> dict[str, Tensor]:
        zs, zt = self._embed(source), self._embed(target)
        ce = F.cross_entropy(self.classifier(zs), source.y)
        logits = self.domain(grad_reverse(torch.cat([zs, zt]), self.grl_weight)).squeeze(1)
        labels = torch.cat([zs.new_zeros(zs.size(0)), zs.new_ones(zt.size(0))])
        return {"ce": ce, "domain": F.binary_cross_entropy_with_logits(logits, labels)}


class _Attention(nn.Module):
    """UDAGCN's attention over the branch outputs: softmax over branches of a linear score."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.score = nn.Linear(channels, 1)

    def forward(self, outputs: list[Tensor]) -> Tensor:
        stacked = torch.stack(outputs, dim=1)  # (N, branches, C)
        weights = torch.softmax(self.score(stacked), dim=1)
        return (stacked * weights).sum(1)


class UDAGCN(SourceOnlyGCN):
    """UDAGCN (module docstring): dual GCN/PPMI propagation with shared weights, attention fusion,
    gradient-reversal domain loss and target entropy."""

    uses_target = True

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        config: GCNBaselineConfig | None = None,
        ppmi_walk_len: int = 10,
        **overrides: Any,
    ) -> None:
        check_positive("ppmi_walk_len", ppmi_walk_len, integer=True)
        self.ppmi_walk_len = ppmi_walk_len
        super().__init__(in_channels, num_classes, config, **overrides)
        seed = self.config.seed

        def build(ei: Tensor, n: int) -> tuple[Tensor, Tensor]:
            return ppmi_operator(
                ei, n, max_walk_len=ppmi_walk_len, generator=torch.Generator().manual_seed(seed)
            )

        self._ppmi = OperatorCache(build)
        self._grl_rate = 0.0

    def _build_extra(self) -> None:
        h = self.config.hidden_channels
        self.attention = _Attention(h)
        self.domain = nn.Sequential(nn.Linear(h, 40), nn.ReLU(), nn.Dropout(0.1), nn.Linear(40, 2))

    def _modules(self) -> list[nn.Module]:
        return [*super()._modules(), self.attention, self.domain]

    def _embed(self, data: Data) -> Tensor:
        local = super()._embed(data)
        glob = self.encoder(data.x, self._ppmi(data.edge_index, data.num_nodes))
        return self.attention([local, glob])

    def _loss(self, source: Data, target: Data, epoch: int, epochs: int) -> dict[str, Tensor]:
        rate = min((epoch + 1) / epochs, 0.05)
        zs, zt = self._embed(source), self._embed(target)
        ce = F.cross_entropy(self.classifier(zs), source.y)
        dom_s = self.domain(grad_reverse(zs, rate))
        dom_t = self.domain(grad_reverse(zt, rate))
        domain = F.cross_entropy(
            dom_s, zs.new_zeros(zs.size(0), dtype=torch.long)
        ) + F.cross_entropy(dom_t, zt.new_ones(zt.size(0), dtype=torch.long))
        probs = torch.softmax(self.classifier(zt), dim=-1).clamp(1e-9, 1.0)
        entropy = (-(probs * probs.log()).sum(-1)).mean()
        return {"ce": ce, "domain": domain, "entropy": entropy * (epoch / epochs * 0.01)}

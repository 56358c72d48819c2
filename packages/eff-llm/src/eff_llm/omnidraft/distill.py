"""OmniDraft's hybrid distillation (Eq. 3–4) and adaptive drafting head (SpecDec++, Algorithms
3–4): :class:`HybridDistillationLoss`, offline :func:`distill_drafter`, the online
:class:`OnlineDistiller` (Algorithm 2) and the :class:`AcceptanceHead` it can train. The method is
described in :mod:`eff_llm.omnidraft`."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from eff_llm.omnidraft.translator import Alignment, CrossVocabTranslator
from eff_shared.errors import check_choice, check_positive
from eff_shared.progress import track

__all__ = [
    "AcceptanceHead",
    "HybridDistillationLoss",
    "OnlineDistiller",
    "distill_drafter",
]


class AcceptanceHead(nn.Module):
    """SpecDec++ acceptance head: P(accept_i | previous accepted) = σ(f_φ(e_i)) on the drafter hidden
    state e_i that produced draft token i (a 1-hidden-layer MLP; the architecture is ours)."""

    def __init__(self, hidden_size: int, width: int = 64):
        super().__init__()
        check_positive("hidden_size", hidden_size, integer=True)
        check_positive("width", width, integer=True)
        self.net = nn.Sequential(nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of acceptance, shape ``hidden.shape[:-1]``."""
        return self.net(hidden).squeeze(-1)


class HybridDistillationLoss(nn.Module):
    """OmniDraft's hybrid distillation loss (Eq. 3–4).

    L = [Σ_{DM} KL(q′_θ ‖ p)(t_i | x) − Σ_{n-gram} λ_i Σ_j log q_θ(d_ij | x)] / #counted target tokens,
    q′_θ = the drafter distribution moved to target space over the vocabulary intersection; with
    ``renormalize_intersection`` q′ and p are renormalised over the intersection (our choice; the
    paper leaves it unstated), else both are the raw (sub-)probabilities. ``lam`` is a constant
    (0 gives the L_DM-only baseline) or ``"target_prob"`` (λ_i = p(t_i), detached).
    """

    def __init__(
        self, lam: float | Literal["target_prob"] = 1.0, renormalize_intersection: bool = True
    ):
        super().__init__()
        if lam != "target_prob":
            check_positive("lam", lam, strict=False)
        self.lam = lam
        self.renormalize_intersection = renormalize_intersection

    def forward(
        self,
        draft_logits: torch.Tensor,
        target_logits: torch.Tensor,
        alignment: Alignment,
        translator: CrossVocabTranslator,
        target_ids: Sequence[int],
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``draft_logits[j]`` predicts ``alignment.draft_ids[j]`` (row j = drafter output at j − 1;
        row 0 unused), ``target_logits[i]`` predicts ``target_ids[i]`` likewise."""
        zero = draft_logits.sum() * 0.0
        kl_sum, nll_sum = zero, zero
        n_dm, n_ng = len(alignment.direct), len(alignment.ngram)
        if n_dm:
            dpos = torch.tensor([a for a, _ in alignment.direct], device=draft_logits.device)
            tpos = torch.tensor([b for _, b in alignment.direct], device=target_logits.device)
            dm_d = translator._dm_draft.to(draft_logits.device)
            dm_t = translator._dm_target.to(target_logits.device)
            zq = draft_logits[dpos][:, dm_d].float()
            zp = target_logits[tpos][:, dm_t].float().to(draft_logits.device)
            if self.renormalize_intersection:
                lq, lp = torch.log_softmax(zq, -1), torch.log_softmax(zp, -1)
            else:
                lq = torch.log_softmax(draft_logits[dpos].float(), -1)[:, dm_d]
                lp = torch.log_softmax(target_logits[tpos].float(), -1)[:, dm_t].to(lq.device)
            kl_sum = (lq.exp() * (lq - lp)).sum()
        if n_ng:
            logq = torch.log_softmax(draft_logits.float(), -1)
            logp = (
                torch.log_softmax(target_logits.float(), -1) if self.lam == "target_prob" else None
            )
            terms = []
            for dps, tp in alignment.ngram:
                ids = torch.tensor([alignment.draft_ids[j] for j in dps], device=logq.device)
                nll = -logq[torch.tensor(dps, device=logq.device), ids].sum()
                if logp is not None:
                    lam = logp[tp, int(target_ids[tp])].exp().detach().to(nll.device)
                else:
                    lam = float(self.lam)
                terms.append(lam * nll)
            nll_sum = torch.stack(terms).sum()
        count = max(n_dm + n_ng, 1)
        loss = (kl_sum + nll_sum) / count
        return loss, {
            "kl": float(kl_sum.detach()) / max(n_dm, 1),
            "nll": float(nll_sum.detach()) / max(n_ng, 1),
            "direct": n_dm,
            "ngram": n_ng,
        }


@dataclass
class _Example:
    ids: list[int]  # prompt + response target ids
    alignment: Alignment
    target_logits: torch.Tensor


def _prepare(target, translator, examples) -> list[_Example]:
    dev = next(target.parameters()).device
    out = []
    with torch.no_grad():
        for prompt, response in examples:
            prompt, response = [int(t) for t in prompt], [int(t) for t in response]
            al = translator.align(prompt, response)
            if not al.draft_ids:
                continue
            ids = prompt + response
            logits = target(input_ids=torch.tensor([ids], device=dev)).logits[0].float()
            # row i predicts token i: shift by one (row 0 unused)
            shifted = torch.cat([logits[:1] * 0, logits[:-1]], 0)
            out.append(_Example(ids, al, shifted))
    return out


def _draft_forward(drafter, ex: _Example, hidden: bool = False):
    dev = next(drafter.parameters()).device
    out = drafter(
        input_ids=torch.tensor([ex.alignment.draft_ids], device=dev), output_hidden_states=hidden
    )
    logits = out.logits[0]
    shifted = torch.cat([logits[:1] * 0, logits[:-1]], 0)
    if not hidden:
        return shifted, None
    h = out.hidden_states[-1][0]
    return shifted, torch.cat([h[:1] * 0, h[:-1]], 0)


def _head_targets(
    ex: _Example, draft_logits: torch.Tensor, translator
) -> tuple[list[int], torch.Tensor]:
    """Soft labels min(1, p(y)/q(y)) for the draft positions of one example (see module doc)."""
    with torch.no_grad():
        q = torch.softmax(draft_logits.float(), -1)
        p = torch.softmax(ex.target_logits.float(), -1).to(q.device)
        pos, labels = [], []
        for j, i in ex.alignment.direct:
            pos.append(j)
            labels.append(
                min(
                    1.0, float(p[i, ex.ids[i]]) / max(float(q[j, ex.alignment.draft_ids[j]]), 1e-12)
                )
            )
        for dps, i in ex.alignment.ngram:
            qq = math.prod(float(q[j, ex.alignment.draft_ids[j]]) for j in dps)
            lab = min(1.0, float(p[i, ex.ids[i]]) / max(qq, 1e-12))
            for j in dps:
                pos.append(j)
                labels.append(lab)
    return pos, torch.tensor(labels)


def _weighted_bce(
    logits: torch.Tensor, labels: torch.Tensor, rejection_weight: float
) -> torch.Tensor:
    ls = torch.nn.functional.logsigmoid(logits)
    l1 = torch.nn.functional.logsigmoid(-logits)
    return -(labels * ls + rejection_weight * (1 - labels) * l1).mean()


def distill_drafter(
    drafter: nn.Module,
    target: nn.Module,
    translator: CrossVocabTranslator,
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    loss: HybridDistillationLoss | None = None,
    epochs: int = 1,
    lr: float = 1e-4,
    batch_size: int = 8,
    weight_decay: float = 0.0,
    optimizer: torch.optim.Optimizer | None = None,
    seed: int = 0,
) -> list[float]:
    """Offline hybrid distillation on speculative-decoding outputs ``(prompt_ids, response_ids)``
    (target ids): AdamW (0.9, 0.999), seeded shuffling; returns the loss per step."""
    check_positive("epochs", epochs, integer=True)
    check_positive("batch_size", batch_size, integer=True)
    check_positive("lr", lr)
    if not examples:
        raise ValueError("examples must not be empty")
    loss = loss if loss is not None else HybridDistillationLoss()
    prepared = _prepare(target, translator, examples)
    if not prepared:
        raise ValueError("no example could be aligned to the draft tokenizer")
    opt = optimizer or torch.optim.AdamW(
        drafter.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay
    )
    gen = torch.Generator().manual_seed(seed)
    drafter.train()
    history = []
    for _ in track(range(epochs), "OmniDraft distillation (epochs)"):
        order = torch.randperm(len(prepared), generator=gen).tolist()
        for b in range(0, len(order), batch_size):
            batch = [prepared[k] for k in order[b : b + batch_size]]
            total = 0.0
            opt.zero_grad(set_to_none=True)
            for ex in batch:
                dl, _ = _draft_forward(drafter, ex)
                value, _ = loss(dl, ex.target_logits, ex.alignment, translator, ex.ids)
                (value / len(batch)).backward()
                total += float(value.detach()) / len(batch)
            opt.step()
            history.append(total)
    drafter.eval()
    return history


class OnlineDistiller:
    """Online (on-policy) drafter updates during speculative decoding (Algorithm 2), with optional
    acceptance-head training (Algorithms 3–4).

    :meth:`observe` buffers each ``(prompt, response)`` from SD; every ``update_interval`` prompts
    the drafter takes one epoch of :class:`HybridDistillationLoss` steps over the buffer, which is
    then cleared. With an ``acceptance_head``: ``"joint"`` takes one head step per drafter step on
    the same batch; ``"interleaved"`` pushes the buffer into a replay buffer of at most
    ``buffer_size`` examples (oldest evicted) and takes ``head_updates`` head steps on random
    mini-batches of it after each drafter update.
    """

    def __init__(
        self,
        drafter: nn.Module,
        translator: CrossVocabTranslator,
        optimizer: torch.optim.Optimizer,
        *,
        target: nn.Module,
        loss: HybridDistillationLoss | None = None,
        update_interval: int = 8,
        schedule: Literal["joint", "interleaved"] = "joint",
        acceptance_head: AcceptanceHead | None = None,
        head_optimizer: torch.optim.Optimizer | None = None,
        buffer_size: int = 256,
        head_updates: int = 4,
        batch_size: int = 8,
        rejection_weight: float = 1.0,
        seed: int = 0,
    ):
        check_positive("update_interval", update_interval, integer=True)
        check_choice("schedule", schedule, ["joint", "interleaved"])
        check_positive("buffer_size", buffer_size, integer=True)
        check_positive("head_updates", head_updates, integer=True)
        check_positive("batch_size", batch_size, integer=True)
        check_positive("rejection_weight", rejection_weight)
        if acceptance_head is not None and head_optimizer is None:
            raise ValueError("head_optimizer is required with acceptance_head")
        self.drafter, self.translator, self.optimizer, self.target = (
            drafter,
            translator,
            optimizer,
            target,
        )
        self.loss = loss or HybridDistillationLoss()
        self.update_interval, self.schedule = update_interval, schedule
        self.head, self.head_optimizer = acceptance_head, head_optimizer
        self.replay: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=buffer_size)
        self.head_updates, self.batch_size, self.rejection_weight = (
            head_updates,
            batch_size,
            rejection_weight,
        )
        self.queue: list[tuple[list[int], list[int]]] = []
        self.gen = torch.Generator().manual_seed(seed)
        self.history: dict[str, list[float]] = {"drafter": [], "head": []}
        self.updates = 0

    def observe(self, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> bool:
        """Buffer one SD output; run an update when the buffer holds ``update_interval`` prompts."""
        self.queue.append(([int(t) for t in prompt_ids], [int(t) for t in response_ids]))
        if len(self.queue) >= self.update_interval:
            self.update()
            return True
        return False

    def _head_step(self, feats: torch.Tensor, labels: torch.Tensor) -> float:
        assert self.head is not None and self.head_optimizer is not None
        self.head.train()
        loss = _weighted_bce(self.head(feats), labels.to(feats.device), self.rejection_weight)
        self.head_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.head_optimizer.step()
        self.head.eval()
        return float(loss.detach())

    def update(self) -> None:
        """One epoch over the buffered examples, then clear the buffer."""
        if not self.queue:
            return
        prepared = _prepare(self.target, self.translator, self.queue)
        self.queue = []
        order = torch.randperm(len(prepared), generator=self.gen).tolist()
        want_h = self.head is not None
        self.drafter.train()
        for b in range(0, len(order), self.batch_size):
            batch = [prepared[k] for k in order[b : b + self.batch_size]]
            self.optimizer.zero_grad(set_to_none=True)
            total, feats, labels = 0.0, [], []
            for ex in batch:
                dl, hid = _draft_forward(self.drafter, ex, hidden=want_h)
                value, _ = self.loss(dl, ex.target_logits, ex.alignment, self.translator, ex.ids)
                (value / len(batch)).backward()
                total += float(value.detach()) / len(batch)
                if want_h:
                    pos, lab = _head_targets(ex, dl.detach(), self.translator)
                    if pos:
                        f = hid.detach()[torch.tensor(pos)]
                        feats.append(f)
                        labels.append(lab)
                        self.replay.append((f, lab))
            self.optimizer.step()
            self.history["drafter"].append(total)
            if want_h and feats and self.schedule == "joint":
                self.history["head"].append(self._head_step(torch.cat(feats), torch.cat(labels)))
        self.drafter.eval()
        if want_h and self.schedule == "interleaved" and self.replay:
            for _ in range(self.head_updates):
                idx = torch.randint(
                    0,
                    len(self.replay),
                    (min(self.batch_size, len(self.replay)),),
                    generator=self.gen,
                )
                f = torch.cat([self.replay[i][0] for i in idx.tolist()])
                lab = torch.cat([self.replay[i][1] for i in idx.tolist()])
                self.history["head"].append(self._head_step(f, lab))
        self.updates += 1

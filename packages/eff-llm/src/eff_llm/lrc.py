"""LRC — Low-Rank Clone: distil a small LM whose weights are low-rank projections of the teacher's.

Hao et al., "A Token is Worth over 1,000 Tokens: Efficient Knowledge Distillation through Low-Rank
Clone", arXiv 2505.12781 (§3, Algorithm 1, Tables 1–2); official code ``CURRENTF/LowRankClone``
(``modeling/co_train_llama.py``: ``AllAttn``, ``MLP``, ``OnlyInOutMLP``, ``CoTrainLM.merge_weight``).

**Soft pruning (§3.1).** The teacher is frozen. The trainable parameters are one projection
W^p ∈ R^{d_T×d_S} per weight matrix plus fresh student RMSNorm gains (initialised to 1). The student's
weights are *functions of the teacher's*:

- input side (q, k, v, gate, up; W^T ∈ R^{out_T×d_T}):  W^S = W^T · W^p            (out_T × d_S)
- output side (o, down; W^T ∈ R^{d_T×in_T}):            W^S = (W^p)ᵀ · W^T         (d_S × in_T)
- embedding and LM head, one shared projection:        E^S = E^T · W^p_emb,  H^S = H^T · W^p_emb

Input-side biases (Qwen2's q/k/v) live in out_T space and stay unprojected; output-side biases are
projected like their weights, b^S = (W^p)ᵀ b^T. Only the hidden size shrinks: layers, heads,
``head_dim``, KV heads and d_mid are the teacher's (``head_dim`` is set explicitly in the student
config). ``ffn_mode="in_out"`` is the code's ``OnlyInOutMLP``: one input projection shared by gate
and up and one output projection.

**Activation clone (§3.2, Algorithm 1).** L = L_LM + L_KL(teacher ‖ student) + α·L_clone with
L_clone = Σ_layers of mean-squared errors (``nn.MSELoss``) between

- q, k, v before RoPE (teacher head space; the student's projections output out_T features),
- gate and up pre-activations (d_mid),
- the attention output and the FFN output in **student** space (Alg. 1, l. 11):
  E(o_attn^S, o_attn^T·W^p_o) and E(o_ffn^S, o_ffn^T·W^p_down).

The official code compares the attention output in **teacher** space (``AllAttn``: before
``zoom_down``): ``attn_out_space="teacher"`` gives that variant, E(o_attn^S·… , o_attn^T) computed as
the student's o_proj input through the teacher's W_o. ``ffn_out_space="teacher"`` likewise compares
the FFN output through the teacher's W_down (what ``OnlyInOutMLP`` does). In ``in_out`` mode the code
replaces the gate/up terms by the FFN-input term E(x^S·(W^p_in)ᵀ, x^T).

L_KL = ``F.kl_div(log_softmax(z_S/T), log_softmax(z_T/T), log_target=True, reduction="batchmean")``
over the (batch, seq, vocab) logits, i.e. summed over positions and averaged over the batch, as the
code does (``kl_reduction="token"`` averages over positions instead). The paper uses T = 40.

:meth:`LowRankClone.to_student` materialises the student as a plain ``LlamaForCausalLM`` /
``Qwen2ForCausalLM`` with hidden size d_S (the code's ``merge_weight``); its logits equal the
in-training student's, because training runs that same transformers module with the composed weights
(``torch.func.functional_call``). Weight composition costs O(L·d_T·d_S·(4d_T + 3d_mid)) per step,
independent of the batch.

``eff llm lrc-train`` trains a tiny clone with ``accelerate`` (``accelerate launch -m eff_shared llm
lrc-train`` runs it on several processes/GPUs).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from eff_shared.errors import check_choice, check_positive, check_type

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "LRCOutput",
    "LowRankClone",
    "LowRankCloneConfig",
    "clone_loss",
    "lrc_trainable_count",
]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")
_ATTN_IN = ("q_proj", "k_proj", "v_proj")
_MLP_IN = ("gate_proj", "up_proj")
_ATTN = (*_ATTN_IN, "o_proj")
_MLP = (*_MLP_IN, "down_proj")


@dataclass(frozen=True)
class LowRankCloneConfig:
    """Hyper-parameters of :class:`LowRankClone` (paper defaults: α = 0.2, T = 40)."""

    student_hidden_size: int
    clone_weight: float = 0.2
    kl_temperature: float = 40.0
    attn_out_space: Literal["student", "teacher"] = "student"
    ffn_out_space: Literal["student", "teacher"] = "student"
    tie_embedding_projection: bool = True
    ffn_mode: Literal["weight", "in_out"] = "weight"
    kl_reduction: Literal["batchmean", "token"] = "batchmean"
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_positive("student_hidden_size", self.student_hidden_size, integer=True)
        check_positive("clone_weight", self.clone_weight, strict=False)
        check_positive("kl_temperature", self.kl_temperature)
        check_choice("attn_out_space", self.attn_out_space, ["student", "teacher"])
        check_choice("ffn_out_space", self.ffn_out_space, ["student", "teacher"])
        check_type("tie_embedding_projection", self.tie_embedding_projection, bool)
        check_choice("ffn_mode", self.ffn_mode, ["weight", "in_out"])
        check_choice("kl_reduction", self.kl_reduction, ["batchmean", "token"])
        check_positive("init_std", self.init_std)


@dataclass
class LRCOutput:
    """What :meth:`LowRankClone.forward` returns (``clone_losses``: per term, summed over layers)."""

    loss: torch.Tensor
    lm_loss: torch.Tensor
    kl_loss: torch.Tensor
    clone_losses: dict[str, torch.Tensor] = field(default_factory=dict)
    logits: torch.Tensor | None = None


def lrc_trainable_count(
    num_layers: int,
    teacher_hidden: int,
    student_hidden: int,
    ffn_mode: str = "weight",
    tie_embedding_projection: bool = True,
) -> int:
    """Closed form of the trainable parameters: k·L·d_T·d_S + e·d_T·d_S + (2L+1)·d_S with k = 7
    (weight mode) or 6 (in_out) projections per layer and e = 1 (tied) or 2 embedding projections."""
    per_layer = 7 if ffn_mode == "weight" else 6
    emb = 1 if tie_embedding_projection else 2
    dd = teacher_hidden * student_hidden
    return per_layer * num_layers * dd + emb * dd + (2 * num_layers + 1) * student_hidden


def clone_loss(
    student: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """L_clone terms: ``nn.MSELoss`` (mean) of each ``"<layer>.<term>"`` activation against its
    target, summed over layers per term (keys of ``student`` and ``target`` must match)."""
    if set(student) != set(target):
        raise ValueError(
            f"student and target activations must have the same keys, got {sorted(student)} and "
            f"{sorted(target)}"
        )
    out: dict[str, torch.Tensor] = {}
    for key in sorted(student):
        term = key.split(".", 1)[1]
        mse = F.mse_loss(student[key].float(), target[key].float())
        out[term] = out[term] + mse if term in out else mse
    return out


def _check_teacher(teacher: nn.Module) -> None:
    from transformers import PreTrainedModel

    check_type("teacher", teacher, PreTrainedModel)
    model_type = getattr(teacher.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise NotImplementedError(
            f"LowRankClone supports teachers with model_type in {list(SUPPORTED_MODEL_TYPES)}, "
            f"got {model_type!r}"
        )
    if getattr(teacher, "is_quantized", False) or getattr(teacher, "hf_quantizer", None):
        raise TypeError(
            "teacher is quantized: LowRankClone composes student weights from the teacher's float "
            "weights; dequantize the teacher (e.g. model.dequantize()) first"
        )
    bad = [n for n, p in teacher.named_parameters() if not p.is_floating_point()]
    if bad:
        raise TypeError(
            f"teacher must have floating-point weights to be frozen and composed, got non-float "
            f"parameters {bad[:3]}"
        )
    act = getattr(teacher.config, "hidden_act", None)
    layer = teacher.model.layers[0]
    if act not in ("silu", "swish") or not hasattr(layer.mlp, "gate_proj"):
        raise ValueError(
            f"teacher MLP must be SwiGLU (hidden_act 'silu' with gate_proj/up_proj/down_proj), got "
            f"hidden_act={act!r}"
        )
    norms = [layer.input_layernorm, layer.post_attention_layernorm, teacher.model.norm]
    if not all(type(n).__name__.endswith("RMSNorm") for n in norms):
        raise ValueError(
            f"teacher norms must be RMSNorm, got {sorted({type(n).__name__ for n in norms})}"
        )


@contextlib.contextmanager
def _capture(model: nn.Module, store: dict[str, torch.Tensor], inputs: bool) -> Iterator[None]:
    """Record the q/k/v/o/gate/up/down outputs of every decoder layer (and, with ``inputs``, the
    o_proj, gate_proj and down_proj inputs) into ``store`` under ``"<layer>.<name>"``."""
    handles = []

    def hook(key: str):
        def fn(_mod, args, out):
            store[key] = out
            if inputs:
                store[key + "_in"] = args[0]

        return fn

    for i, layer in enumerate(model.model.layers):
        for name in _ATTN:
            mod = getattr(layer.self_attn, name)
            handles.append(mod.register_forward_hook(hook(f"{i}.{name}")))
        for name in _MLP:
            mod = getattr(layer.mlp, name)
            handles.append(mod.register_forward_hook(hook(f"{i}.{name}")))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class LowRankClone(nn.Module):
    """Teacher + learned projections; the student is a function of both (module docstring).

    ``teacher`` — a Llama- or Qwen2-family ``PreTrainedModel`` (frozen in place, put in eval mode);
    ``seed`` — initialisation of the projections, N(0, ``init_std``²) as the code's ``reinit_weight``.
    """

    def __init__(self, teacher: nn.Module, config: LowRankCloneConfig, seed: int = 0) -> None:
        super().__init__()
        check_type("config", config, LowRankCloneConfig)
        _check_teacher(teacher)
        tcfg = teacher.config
        d_t, d_s = tcfg.hidden_size, config.student_hidden_size
        if d_s >= d_t:
            raise ValueError(
                f"student_hidden_size must be smaller than the teacher's hidden size {d_t}, got {d_s}"
            )
        if d_s % tcfg.num_attention_heads:
            raise ValueError(
                f"student_hidden_size={d_s} must be divisible by num_attention_heads="
                f"{tcfg.num_attention_heads} (transformers' config validation requires it)"
            )
        self.config = config
        self.teacher = teacher
        for p in teacher.parameters():
            p.requires_grad_(False)
        teacher.eval()
        self.num_layers = len(teacher.model.layers)
        self.teacher_tied = bool(getattr(tcfg, "tie_word_embeddings", False))
        head_dim = getattr(tcfg, "head_dim", None) or d_t // tcfg.num_attention_heads
        self.student_config = type(tcfg).from_dict(
            {
                **tcfg.to_dict(),
                "hidden_size": d_s,
                "head_dim": head_dim,
                "tie_word_embeddings": self.teacher_tied and config.tie_embedding_projection,
            }
        )
        self.student_config._attn_implementation = tcfg._attn_implementation
        ref = next(teacher.parameters())
        gen = torch.Generator().manual_seed(seed)

        def proj() -> nn.Parameter:
            w = torch.randn(d_t, d_s, generator=gen) * config.init_std
            return nn.Parameter(w.to(device=ref.device, dtype=ref.dtype))

        names = ["q", "k", "v", "o"]
        names += ["gate", "up", "down"] if config.ffn_mode == "weight" else ["mlp_in", "mlp_out"]
        projections = {f"l{i}_{n}": proj() for i in range(self.num_layers) for n in names}
        projections["embed"] = proj()
        if not config.tie_embedding_projection:
            projections["head"] = proj()
        self.projections = nn.ParameterDict(projections)

        def ones() -> nn.Parameter:
            return nn.Parameter(torch.ones(d_s, device=ref.device, dtype=ref.dtype))

        norms = {f"l{i}_{n}": ones() for i in range(self.num_layers) for n in ("input", "post")}
        norms["final"] = ones()
        self.norms = nn.ParameterDict(norms)
        # The student skeleton: the plain transformers model on the meta device (no storage);
        # forward runs it with the composed weights. Kept out of the module tree on purpose.
        with torch.device("meta"):
            skeleton = type(teacher)(self.student_config)
        skeleton.model.rotary_emb = teacher.model.rotary_emb  # same head_dim and RoPE parameters
        skeleton.eval()
        self.__dict__["_skeleton"] = skeleton

    # -- weights -------------------------------------------------------------------------------

    def _proj_key(self, i: int, name: str) -> str:
        if self.config.ffn_mode == "in_out" and name in ("gate_proj", "up_proj", "down_proj"):
            return f"l{i}_mlp_out" if name == "down_proj" else f"l{i}_mlp_in"
        return f"l{i}_{name.removesuffix('_proj')}"

    def student_state_dict(self) -> dict[str, torch.Tensor]:
        """The student's weights as a transformers state dict (differentiable in the projections)."""
        t = self.teacher
        out: dict[str, torch.Tensor] = {}
        for i, layer in enumerate(t.model.layers):
            pre = f"model.layers.{i}."
            for block, names in (
                ("self_attn", _ATTN),
                ("mlp", _MLP),
            ):
                for name in names:
                    lin = getattr(getattr(layer, block), name)
                    p = self.projections[self._proj_key(i, name)]
                    key = f"{pre}{block}.{name}"
                    if name in ("o_proj", "down_proj"):  # output side: (W^p)ᵀ W^T
                        out[key + ".weight"] = p.T @ lin.weight
                        if lin.bias is not None:
                            out[key + ".bias"] = p.T @ lin.bias
                    else:  # input side: W^T W^p, bias in out_T space
                        out[key + ".weight"] = lin.weight @ p
                        if lin.bias is not None:
                            out[key + ".bias"] = lin.bias
            out[pre + "input_layernorm.weight"] = self.norms[f"l{i}_input"]
            out[pre + "post_attention_layernorm.weight"] = self.norms[f"l{i}_post"]
        emb = t.model.embed_tokens.weight @ self.projections["embed"]
        out["model.embed_tokens.weight"] = emb
        out["model.norm.weight"] = self.norms["final"]
        if self.student_config.tie_word_embeddings:
            out["lm_head.weight"] = emb
        else:
            head_p = self.projections["embed" if self.config.tie_embedding_projection else "head"]
            out["lm_head.weight"] = t.lm_head.weight @ head_p
        return out

    def to_student(self, dtype: torch.dtype | None = None) -> nn.Module:
        """The trained student as a plain ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (hidden d_S)."""
        with torch.no_grad():
            state = {k: v.detach().clone() for k, v in self.student_state_dict().items()}
        with torch.device("meta"):
            student = type(self.teacher)(copy.deepcopy(self.student_config))
        student.load_state_dict(state, strict=True, assign=True)
        if self.student_config.tie_word_embeddings:
            student.lm_head.weight = student.model.embed_tokens.weight
        student.model.rotary_emb = copy.deepcopy(self.teacher.model.rotary_emb)
        if dtype is not None:
            student = student.to(dtype)
        return student.eval()

    # -- forward -------------------------------------------------------------------------------

    def student_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits of the functional student (the model :meth:`to_student` exports)."""
        out = torch.func.functional_call(
            self._skeleton,
            self.student_state_dict(),
            (),
            {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False},
        )
        return out.logits

    def _clone_pairs(
        self, s: dict[str, torch.Tensor], t: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """(student activations, targets) of every clone term, keyed ``"<layer>.<term>"``."""
        cfg = self.config
        student, target = {}, {}
        for i, layer in enumerate(self.teacher.model.layers):
            for name in _ATTN_IN:
                student[f"{i}.{name[0]}"], target[f"{i}.{name[0]}"] = (
                    s[f"{i}.{name}"],
                    t[f"{i}.{name}"],
                )
            if cfg.ffn_mode == "weight":
                for name in _MLP_IN:
                    term = name.removesuffix("_proj")
                    student[f"{i}.{term}"], target[f"{i}.{term}"] = (
                        s[f"{i}.{name}"],
                        t[f"{i}.{name}"],
                    )
            else:  # OnlyInOutMLP: E(x^S (W^p_in)ᵀ, x^T)
                p_in = self.projections[f"l{i}_mlp_in"]
                student[f"{i}.ffn_in"] = s[f"{i}.gate_proj_in"] @ p_in.T
                target[f"{i}.ffn_in"] = t[f"{i}.gate_proj_in"]
            for term, block, name, space in (
                ("attn_out", "self_attn", "o_proj", cfg.attn_out_space),
                ("ffn_out", "mlp", "down_proj", cfg.ffn_out_space),
            ):
                key = f"{i}.{name}"
                if space == "student":
                    p = self.projections[self._proj_key(i, name)]
                    student[f"{i}.{term}"], target[f"{i}.{term}"] = s[key], t[key] @ p
                else:  # teacher space: the student's pre-projection output through W^T
                    lin = getattr(getattr(layer, block), name)
                    student[f"{i}.{term}"] = F.linear(s[key + "_in"], lin.weight, lin.bias)
                    target[f"{i}.{term}"] = t[key]
        return student, target

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> LRCOutput:
        """L = L_LM + L_KL + α·L_clone on a batch. ``labels`` default to ``input_ids`` (next-token
        prediction; ``-100`` positions are ignored); logits are the student's."""
        cfg = self.config
        t_acts: dict[str, torch.Tensor] = {}
        s_acts: dict[str, torch.Tensor] = {}
        need_inputs = (
            "teacher" in (cfg.attn_out_space, cfg.ffn_out_space) or cfg.ffn_mode == "in_out"
        )
        with torch.no_grad(), _capture(self.teacher, t_acts, inputs=need_inputs):
            t_logits = self.teacher(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits
        with _capture(self._skeleton, s_acts, inputs=need_inputs):
            s_logits = self.student_logits(input_ids, attention_mask)
        labels = input_ids if labels is None else labels
        lm_loss = F.cross_entropy(
            s_logits[:, :-1].reshape(-1, s_logits.shape[-1]).float(),
            labels[:, 1:].reshape(-1),
            ignore_index=-100,
        )
        temp = cfg.kl_temperature
        log_s = F.log_softmax(s_logits.float() / temp, dim=-1)
        log_t = F.log_softmax(t_logits.float() / temp, dim=-1)
        if cfg.kl_reduction == "token":
            log_s, log_t = log_s.reshape(-1, log_s.shape[-1]), log_t.reshape(-1, log_t.shape[-1])
        kl = F.kl_div(log_s, log_t, log_target=True, reduction="batchmean")
        terms = clone_loss(*self._clone_pairs(s_acts, t_acts))
        loss = lm_loss + kl
        if cfg.clone_weight > 0:
            loss = loss + cfg.clone_weight * sum(terms.values())
        return LRCOutput(
            loss=loss, lm_loss=lm_loss, kl_loss=kl, clone_losses=terms, logits=s_logits
        )

"""``HFReader``: ReMindRAG's ``LLMClient`` on a local Hugging Face causal LM (extra ``eff-graph[hf]``).

ReMindRAG renders a prompt, calls ``complete(messages, task=..., context=...)`` and parses the reply
*text* (a ```` ```cot-ans ```` block). :class:`HFReader` answers that call with a ``transformers``
causal LM in this process, in one of two modes:

* ``mode="generate"``: greedy decoding of the rendered prompt, reply returned as decoded. Use it with
  an instruction-tuned model that writes the ```` ```cot-ans ```` block itself.
* ``mode="choose"`` (default): the model only decides; the reply format is the reader's. Closed
  steps are scored: the reader appends the opening of the answer block (```` ```cot-ans\\n````) to the
  prompt and compares the model's log-likelihood of each admissible option (mean log-probability per
  token with ``length_normalize``, else the sum; the first of equal scores wins):
  ``judge`` / ``need_rag`` → ``yes`` or ``no``; ``next_node`` → ``entity:<id>`` for each listed
  neighbour, each visited node other than the current one that still has unexplored edges, and
  ``chunk:<id>`` for each unread chunk of a visited anchor; ``memorize`` → ``yes``/``no`` per traversed
  relation edge and per read chunk (``<id> useful?``), returned as the JSON ReMindRAG expects.
  Open steps (``answer``, ``summarize``, unknown tasks) are decoded greedily, ``answer`` with the block
  opening prefilled and cut at the first newline or ```` ``` ````. Small or untuned models therefore
  always produce a parseable reply, and every decision still comes from the model's logits.

Prompts: the tokenizer's chat template when it has one (``add_generation_prompt=True``), else the
messages as ``<role>: <content>`` blocks followed by ``assistant:``. Usage per call, as
:class:`~eff_graph.remindrag.llm.UsageMeter` and ReMindRAG's own accounting count it:
``prompt_tokens`` = tokens of the rendered prompt (counted once, although scoring re-reads it for every
option), ``completion_tokens`` = generated tokens, or the tokens of the chosen options. Nothing is
downloaded: :meth:`HFReader.from_pretrained` loads local files only; :func:`byte_level_tokenizer`
builds a 259-token byte-level tokenizer for models made from a config.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from eff_graph.remindrag.llm import Completion, check_messages
from eff_shared.errors import check_choice, check_positive, check_type

__all__ = ["HFReader", "byte_level_tokenizer", "next_node_options"]

_EXTRA_HINT = "pip install 'eff-graph[hf]'"
BLOCK_OPEN = "```cot-ans\n"
CLOSED_TASKS = ("judge", "need_rag", "next_node", "memorize")


def _import_hf() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ImportError(
            f"HFReader needs the optional extra: {_EXTRA_HINT} (transformers and torch); "
            f"import failed: {exc}"
        ) from exc
    return torch, transformers


def byte_level_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` over the 256 bytes plus ``<pad>`` (0), ``<s>`` (1, prepended to
    every encoded text) and ``</s>`` (2): 259 ids, any text, exact round trip, no download. For toy
    models built from a config (``vocab_size=259``)."""
    _import_hf()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {t: i for i, t in enumerate(specials + alphabet)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


class HFReader:
    """ReMindRAG's LLM client on a local ``transformers`` causal LM (module docstring: modes, prompt,
    usage). ``model``: a causal LM (``AutoModelForCausalLM``-like: ``forward(input_ids,
    attention_mask, position_ids, logits_to_keep)`` → ``.logits``, and ``generate``); ``tokenizer``:
    its tokenizer. Runs under ``torch.no_grad`` on the model's device; greedy, so deterministic."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        mode: Literal["choose", "generate"] = "choose",
        max_new_tokens: int = 64,
        length_normalize: bool = True,
    ) -> None:
        self._torch, _ = _import_hf()
        if not callable(model) or not hasattr(model, "generate"):
            raise TypeError(
                f"model must be a transformers causal LM (callable with generate()), got "
                f"{type(model).__name__}"
            )
        if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
            raise TypeError(
                f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}"
            )
        check_choice("mode", mode, ("choose", "generate"))
        check_positive("max_new_tokens", max_new_tokens, integer=True)
        check_type("length_normalize", length_normalize, bool)
        self.model, self.tokenizer = model, tokenizer
        self.mode, self.max_new_tokens = mode, max_new_tokens
        self.length_normalize = length_normalize
        pad = tokenizer.pad_token_id
        self._pad = pad if pad is not None else (tokenizer.eos_token_id or 0)

    @classmethod
    def from_pretrained(cls, path: str, *, dtype: Any = None, **kw: Any) -> HFReader:
        """Load a local model directory (``AutoModelForCausalLM``/``AutoTokenizer`` with
        ``local_files_only=True``: nothing is downloaded) in ``dtype`` (None: the checkpoint's);
        ``kw`` go to :class:`HFReader`."""
        _, transformers = _import_hf()
        from transformers.utils import logging as hf_logging

        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # no "Loading weights" bar on stderr
        try:
            tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, dtype=dtype
            ).eval()
        finally:
            if bar:
                hf_logging.enable_progress_bar()
        return cls(model, tok, **kw)

    # ------------------------------------------------------------------ prompt and tokens
    def render(self, messages: list[dict[str, str]]) -> str:
        """The prompt text the model reads for ``messages`` (chat template, or plain roles)."""
        messages = check_messages(messages)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        body = "\n\n".join(f"{m['role']}: {m['content']}" for m in messages)
        return f"{body}\n\nassistant: "

    def _encode(self, text: str, special: bool) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def _prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        templated = bool(getattr(self.tokenizer, "chat_template", None))
        return self._encode(self.render(messages), special=not templated)

    @property
    def _device(self) -> Any:
        dev = getattr(self.model, "device", None)
        return dev if dev is not None else next(self.model.parameters()).device

    # ------------------------------------------------------------------ model calls
    def score(self, prompt_ids: list[int], options: list[str]) -> list[float]:
        """Log-likelihood of each option's tokens after ``prompt_ids`` (mean per token with
        ``length_normalize``, else the sum); one left-padded batch, logits of the option span only."""
        torch = self._torch
        opts = [self._encode(o, special=False) for o in options]
        if any(not o for o in opts):
            raise ValueError("every option must encode to at least one token")
        k = max(len(o) for o in opts)
        seqs = [prompt_ids + o for o in opts]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp_min(0)
        dev = self._device
        with torch.no_grad():
            logits = self.model(
                input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                logits_to_keep=k + 1,
            ).logits  # fmt: skip
        logp = logits[:, -(k + 1) : -1].float().log_softmax(-1).cpu()  # predicts the last k tokens
        out = []
        for i, o in enumerate(opts):
            target = torch.tensor(o)
            lp = logp[i, k - len(o) :].gather(-1, target[:, None]).sum().item()
            out.append(lp / len(o) if self.length_normalize else lp)
        return out

    def generate(self, prompt_ids: list[int]) -> list[int]:
        """Greedy continuation of ``prompt_ids`` (at most ``max_new_tokens``, stops at EOS)."""
        torch = self._torch
        ids = torch.tensor([prompt_ids], device=self._device)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                max_new_tokens=self.max_new_tokens, pad_token_id=self._pad,
                eos_token_id=self.tokenizer.eos_token_id,
            )  # fmt: skip
        new = out[0, len(prompt_ids) :].tolist()
        eos = self.tokenizer.eos_token_id
        return new[: new.index(eos)] if eos is not None and eos in new else new

    def _choose(self, prompt_ids: list[int], options: list[str]) -> tuple[str, int]:
        scores = self.score(prompt_ids, options)
        best = options[max(range(len(options)), key=lambda i: (scores[i], -i))]
        return best, len(self._encode(best, special=False))

    # ------------------------------------------------------------------ the LLMClient protocol
    def complete(
        self,
        messages: list[dict[str, str]],
        *,
        task: str | None = None,
        context: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Completion:
        prompt_ids = self._prompt_ids(messages)
        if self.mode == "choose" and task in CLOSED_TASKS and context is not None:
            text, n_out = self._closed(task, context, prompt_ids)
        elif self.mode == "choose" and task == "answer":
            opened = prompt_ids + self._encode(BLOCK_OPEN, special=False)
            new = self.generate(opened)
            answer = self.tokenizer.decode(new, skip_special_tokens=True)
            answer = answer.split("```")[0].split("\n")[0].strip()
            text, n_out = f"{BLOCK_OPEN}{answer}\n```", len(new)
        else:
            new = self.generate(prompt_ids)
            text, n_out = self.tokenizer.decode(new, skip_special_tokens=True), len(new)
        return Completion(text, len(prompt_ids), n_out)

    def _closed(self, task: str, context: dict[str, Any], prompt_ids: list[int]) -> tuple[str, int]:
        opened = prompt_ids + self._encode(BLOCK_OPEN, special=False)
        if task in ("judge", "need_rag"):
            choice, n = self._choose(opened, ["yes", "no"])
            return f"{BLOCK_OPEN}{choice}\n```", n
        if task == "next_node":
            options = next_node_options(context)
            if not options:  # nothing admissible listed: let the model write it
                new = self.generate(prompt_ids)
                return self.tokenizer.decode(new, skip_special_tokens=True), len(new)
            choice, n = self._choose(opened, options)
            return f"{BLOCK_OPEN}{choice}\n```", n
        items = [("edges", p["id"]) for p in context["path"] if p["kind"] == "relation"]
        items += [("chunks", c) for c in context["chunks"]]
        useful: dict[str, list[str]] = {"edges": [], "chunks": []}
        n = 0
        for key, item in items:
            choice, k = self._choose(
                opened + self._encode(f"{item} useful? ", special=False), ["yes", "no"]
            )
            n += k
            if choice == "yes":
                useful[key].append(item)
        return f"{BLOCK_OPEN}{json.dumps(useful)}\n```", n


def next_node_options(context: dict[str, Any]) -> list[str]:
    """The admissible ``next_node`` replies in ReMindRAG's context, in order: listed neighbours,
    visited nodes (not the current one) with unexplored edges, unread chunks of visited anchors."""
    out = [f"entity:{c['to']}" for c in context["candidates"]]
    current = context.get("current")
    out += [
        f"entity:{e}"
        for e in context["entities"]
        if e != current and context["out_degree"].get(e, 0) > 0 and f"entity:{e}" not in out
    ]
    out += [f"chunk:{c}" for c in context["unread_anchor_chunks"]]
    return out

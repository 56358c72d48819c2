"""OmniDraft: one drafter for any target — cross-vocabulary speculative decoding with an online
n-gram cache, hybrid distillation and adaptive drafting (Ramakrishnan et al., Qualcomm AI Research,
arXiv 2507.02659; no public code — built from §3.1–3.3 and Algorithms 1–4).

A drafter q over V_q proposes ``k`` draft tokens; they are translated into target tokens and the
target p over V_p verifies them in one forward pass (speculative decoding, Leviathan et al. 2023).

- **Direct mapping (DM, §3.1):** d ↔ t when their byte strings are identical. Every token is first
  normalised to its bytes (ByteLevel 'Ġ'/'Ċ' through the GPT-2 byte table, SentencePiece '▁' → space,
  ``<0xNN>`` byte fall-back), so tokenizers with different marker conventions meet on one alphabet.
- **Online n-gram cache (§3.2, Algorithm 1):** C = {(d_1..d_n) → t}, n ≥ 2. After each verification
  round the committed target tokens are re-tokenized with the draft tokenizer *in context*; every
  target token that the draft tokenizer splits into n ≥ 2 draft tokens whose bytes concatenate to
  the target token's bytes gives an entry. First-seen wins, no eviction. Character spans of target
  tokens come from decoding token by token, never from re-encoding (the target emits
  non-canonical tokenizations).
- **Translation:** left to right, the **longest** run of draft tokens that hits C becomes its
  target token with q′(t) = Π_j q(d_j); else the direct mapping, q′(t) = q(d); else the proposal
  stops. ``suppress_unmappable`` (UAG's alternative) masks draft tokens that can never be
  translated while drafting.
- **Verification:** greedy — accept while the target argmax equals the proposal, then the target's
  own token (so the output equals the target's greedy output exactly). Sampling — accept t with
  min(1, p(t)/r(t)), else sample norm(max(0, p − r)) (Leviathan et al., Algorithm 1) where r is the
  proposal distribution of target tokens at that position. ``residual="eq2"`` is the paper's Eq. 2:
  r(t_ng) = Π q(d_ij) for the n-gram drafted this round, r(d_i1) = q(d_i1) − Π q(d_ij), r = q on the
  other directly mapped tokens, 0 on unmapped ones. Eq. 2 ignores the n-grams *not* drafted this
  round and the longest-match look-ahead, so with a non-empty cache it is only approximately
  distribution-preserving. ``residual="exact"`` (**our addition**) computes r exactly: it expands
  the drafter over the cache trie from the current draft state (batched drafter forwards, one per
  trie level) and conditions on the continuations excluded by the longest-match rule at earlier
  positions; with it the output follows the target distribution exactly (tested with a χ² test).
  A translation that stops at an unmappable draft token is treated as a rejection (the stop event
  has probability 1 − Σ r), so the next token is drawn from the residual, not from p as the paper's
  "bonus from p" would (which is biased whenever the drafter puts mass on unmappable tokens); when
  the draft budget is exhausted r ≡ 0 and the residual is p itself (the usual bonus token).
- **Hybrid distillation (§3.3, Eq. 3–4):** L = Σ_i I_DM(d_i)·KL(q′_θ ‖ p)(t_i | x) − λ Σ_i
  I_Ngram(d_i)·log q_θ(d_i | x): reverse KL in target space on directly mapped positions, NLL in draft
  space on the sub-tokens of merged tokens that are n-gram cache entries (I_Ngram), λ constant or
  λ = p(t_i). q′ lives on the vocabulary intersection, so q′ and p are renormalised over it
  (unstated in the paper: ``renormalize_intersection``).
  Responses are aligned to draft tokens by byte offsets; draft tokens straddling a target-token
  boundary belong to neither term. Loss = sum over counted target tokens / their number.
- **Adaptive drafting (SpecDec++, §3.3, Algorithms 3–4):** a head f_φ on the drafter hidden state
  that produced each proposed token, P(accept_i | previous) = σ(f_φ(e_i)); drafting stops after
  token i when 1 − Π_{j≤i} σ(f_φ(e_j)) > γ. Trained with a weighted BCE on the soft labels
  min(1, p(y_i)/q_θ(y_i)) (for merged tokens the merged ratio p(t)/Π q(d_j) on every sub-token), in
  the **joint** (one head step per drafter step on the same batch) or **interleaved** (several head
  steps per drafter update from a replay buffer of at most N examples, oldest evicted) schedule.
  γ, the BCE weight and the head (1 hidden layer) are not given in the paper: ours.

τ (committed target tokens per target forward, bonus included) and the acceptance rate
(accepted / proposed target tokens) are the hardware-independent metrics. The loop runs inside
``target.generate(input_ids, custom_generate=omnidraft_decoding_loop, drafter=..., ...)`` (the
transformers 5.x hook for a custom decoding loop; there is no public hook for a custom
``CandidateGenerator``) or standalone through :func:`omnidraft_generate`. Batch size 1.

Modules: :mod:`~eff_llm.omnidraft.translator` (token byte forms, n-gram cache, translator),
:mod:`~eff_llm.omnidraft.decoding` (drafters, verification, the decoding loop),
:mod:`~eff_llm.omnidraft.distill` (hybrid distillation, the online distiller, the acceptance head).
"""

from eff_llm.omnidraft.decoding import (
    OracleDrafter,
    SpeculativeOutput,
    omnidraft_decoding_loop,
    omnidraft_generate,
)
from eff_llm.omnidraft.distill import (
    AcceptanceHead,
    HybridDistillationLoss,
    OnlineDistiller,
    distill_drafter,
)
from eff_llm.omnidraft.translator import (
    Alignment,
    CrossVocabTranslator,
    NGramCache,
    Translation,
    token_byte_forms,
)

__all__ = [
    "AcceptanceHead",
    "Alignment",
    "CrossVocabTranslator",
    "HybridDistillationLoss",
    "NGramCache",
    "OnlineDistiller",
    "OracleDrafter",
    "SpeculativeOutput",
    "Translation",
    "distill_drafter",
    "omnidraft_decoding_loop",
    "omnidraft_generate",
    "token_byte_forms",
]

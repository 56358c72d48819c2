"""Generated data: domain-shifted contextual SBM graphs (ImGDA) and a multi-hop QA world (ReMindRAG).

Nothing is downloaded. ``csbm_domain_pair`` and ``make_long_tailed`` return PyG ``Data`` objects
(torch and torch_geometric are imported lazily so that ReMindRAG code never pays for them);
``multihop_world`` is plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from eff_shared.errors import check_positive, check_type
from eff_shared.seeding import make_rng

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = [
    "CHAIN",
    "HOPS",
    "PASSES",
    "SHIFTS",
    "Chunk",
    "Question",
    "Triple",
    "csbm_domain_pair",
    "long_tail_sizes",
    "make_long_tailed",
    "multihop_world",
]


# --------------------------------------------------------------------------------------------
# Contextual SBM source/target pair (ImGDA)
# --------------------------------------------------------------------------------------------


SHIFTS = (
    "both",
    "structure",
    "feature",
)  # csbm_domain_pair(shift=...): which shifts the target gets


def _check_imbalance(imbalance: float) -> None:
    check_type("imbalance", imbalance, (int, float))
    if not math.isfinite(imbalance) or imbalance < 1:
        raise ValueError(f"imbalance must be a finite number >= 1, got {imbalance!r}")


def long_tail_sizes(n_max: int, num_classes: int, imbalance: float) -> list[int]:
    """GraphENS class sizes ``n_c = int(n_max · (1/ρ)^{c/(C−1)})``, largest first.

    ``ValueError("class c empty; lower imbalance")`` when a size rounds down to 0."""
    _check_imbalance(imbalance)
    check_positive("n_max", n_max, integer=True)
    check_positive("num_classes", num_classes, integer=True)
    if num_classes == 1:
        return [n_max]
    mu = (1.0 / imbalance) ** (1.0 / (num_classes - 1))
    sizes = [int(n_max * mu**c + 1e-9) for c in range(num_classes)]
    for c, n in enumerate(sizes):
        if n < 1:
            raise ValueError(
                f"class {c} empty; lower imbalance (n_max={n_max}, imbalance={imbalance})"
            )
    return sizes


def _sbm_edges(y: np.ndarray, p_in: float, p_out: float, rng: np.random.Generator) -> np.ndarray:
    n = y.size
    iu, ju = np.triu_indices(n, 1)
    prob = np.where(y[iu] == y[ju], p_in, p_out)
    keep = rng.random(iu.size) < prob
    src, dst = iu[keep], ju[keep]
    ei = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    order = np.lexsort((ei[1], ei[0]))
    return ei[:, order]


def _rotation(d: int, rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))[None, :]


def _check_prob(name: str, p: float) -> None:
    check_type(name, p, (int, float))
    if not 0 <= p <= 1:
        raise ValueError(f"{name} must lie in [0, 1], got {p!r}")


def csbm_domain_pair(
    num_classes: int = 5,
    num_features: int = 32,
    imbalance: float = 20.0,
    source_max: int = 400,
    target_per_class: int = 300,
    mean_scale: float = 0.45,
    feature_shift: float = 0.2,
    mean_noise: float = 0.3,
    noise: tuple[float, float] = (1.0, 1.2),
    p_in: tuple[float, float] = (0.03, 0.015),
    p_out: float = 0.004,
    seed: int = 0,
    *,
    shift: str = "both",
) -> tuple[Data, Data]:
    """A class-imbalanced source graph and a balanced, shifted target graph (contextual SBMs).

    Class means ``μ_c ~ mean_scale·N(0, I_D)``; source features ``x = μ_y + noise[0]·ε`` with class
    sizes :func:`long_tail_sizes` ``(source_max, C, imbalance)`` (drawn at those sizes directly, not
    by removing nodes; see :func:`make_long_tailed` for the GraphENS removal rule). Target:
    ``target_per_class`` nodes per class, **feature shift** ``μ_t = μ((1 − s)I + sR) + mean_noise·ξ``
    (``R`` a Haar-random rotation, ``ξ`` standard normal, ``s = feature_shift``), noise ``noise[1]``,
    and **structure shift** (homophily ``p_in[1]`` instead of ``p_in[0]``; ``p_out`` in both).
    Nodes are ordered by class. ``y`` is set on both graphs; the target's labels are for evaluation.

    ``shift`` picks which of the two shifts the target gets (one of :data:`SHIFTS`): ``"both"``
    (default, the spec's pair), ``"structure"`` (same feature distribution as the source: ``μ_t = μ``
    and noise ``noise[0]``; only the target graph is sparser, ``p_in[1]``) or ``"feature"`` (the
    source's homophily ``p_in[0]`` on the target; features shifted as above). The random draws are
    the same for every ``shift`` (the graphs differ only in the shift that is switched off).
    """
    import torch
    from torch_geometric.data import Data

    check_positive("num_classes", num_classes, integer=True)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    check_positive("num_features", num_features, integer=True)
    check_positive("target_per_class", target_per_class, integer=True)
    for name, v in (("mean_scale", mean_scale), ("mean_noise", mean_noise)):
        check_positive(name, v, strict=False)
    _check_prob("feature_shift", feature_shift)
    if len(noise) != 2 or len(p_in) != 2:
        raise ValueError("noise and p_in must be (source, target) pairs")
    for v in noise:
        check_positive("noise", v, strict=False)
    for v in (*p_in, p_out):
        _check_prob("p_in/p_out", v)
    if shift not in SHIFTS:
        raise ValueError(f"shift must be one of {SHIFTS}, got {shift!r}")
    sizes = long_tail_sizes(source_max, num_classes, imbalance)

    mu = mean_scale * make_rng(seed, 0).standard_normal((num_classes, num_features))
    rot = _rotation(num_features, make_rng(seed, 1))
    mix = (1 - feature_shift) * np.eye(num_features) + feature_shift * rot
    mu_t = mu @ mix + mean_noise * make_rng(seed, 2).standard_normal(mu.shape)
    sigma_t, pin_t = noise[1], p_in[1]
    if shift == "structure":  # the source's p(x | y) on the target: only the edges shift
        mu_t, sigma_t = mu, noise[0]
    elif shift == "feature":
        pin_t = p_in[0]

    def graph(means: np.ndarray, counts: list[int], sigma: float, pin: float, key: int) -> Data:
        y = np.repeat(np.arange(num_classes), counts)
        x = means[y] + sigma * make_rng(seed, key).standard_normal((y.size, num_features))
        ei = _sbm_edges(y, pin, p_out, make_rng(seed, key + 1))
        return Data(
            x=torch.tensor(x, dtype=torch.float32),
            edge_index=torch.tensor(ei, dtype=torch.long),
            y=torch.tensor(y, dtype=torch.long),
        )

    source = graph(mu, sizes, noise[0], p_in[0], 3)
    target = graph(mu_t, [target_per_class] * num_classes, sigma_t, pin_t, 5)
    return source, target


def make_long_tailed(
    data: Data,
    imbalance: float,
    remove_low_degree: bool = True,
    rounds: int = 10,
    seed: int = 0,
) -> Data:
    """GraphENS ``make_longtailed_data_remove`` (as used by ImGDA): shrink classes to long-tailed sizes.

    Classes are ranked by size; class of rank r keeps ``min(n_max·(1/ρ)^{r/(C−1)}, n_r)`` nodes. The
    largest class loses nodes in 1 round, the others in ``rounds`` rounds: in round j the
    ``j·n_remove // rounds`` nodes of lowest degree (degrees recomputed on the graph without the nodes
    removed so far; ties by node id) are removed. ``remove_low_degree=False`` removes uniformly random
    nodes instead (seeded). Returns the re-indexed induced subgraph (``x``, ``y``, ``edge_index``).
    """
    import torch
    from torch_geometric.utils import subgraph

    from eff_graph._gnn import check_graph

    _check_imbalance(imbalance)
    check_positive("rounds", rounds, integer=True)
    check_type("remove_low_degree", remove_low_degree, bool)
    check_graph(data, "data", need_y=True)
    y, ei, n = data.y, data.edge_index, data.num_nodes
    num_classes = int(y.max()) + 1
    counts = torch.bincount(y, minlength=num_classes)
    ranked = sorted(range(num_classes), key=lambda c: (-int(counts[c]), c))
    n_max = int(counts[ranked[0]])
    mu = (1.0 / imbalance) ** (1.0 / max(num_classes - 1, 1))
    removed = torch.zeros(n, dtype=torch.bool)
    rng = make_rng(seed, 0)
    for r, c in enumerate(ranked):
        keep = min(int(n_max * mu**r + 1e-9), int(counts[c]))
        if keep < 1:
            raise ValueError(f"class {c} empty; lower imbalance")
        n_remove = int(counts[c]) - keep
        members = torch.nonzero(y == c).flatten()
        if n_remove == 0:
            continue
        if not remove_low_degree:
            removed[members[rng.permutation(members.numel())[:n_remove]]] = True
            continue
        n_rounds = 1 if r == 0 else rounds
        chosen = members[:0]
        for j in range(1, n_rounds + 1):
            alive = ~removed
            alive[chosen] = False
            mask = alive[ei[0]] & alive[ei[1]]
            deg = torch.bincount(ei[1][mask], minlength=n)[members]
            order = torch.argsort(deg, stable=True)  # lowest degree first, ties by node id
            chosen = members[order[: (j * n_remove) // n_rounds]]
        removed[chosen] = True
    kept = torch.nonzero(~removed).flatten()
    new_ei, _ = subgraph(kept, ei, relabel_nodes=True, num_nodes=n)
    out = data.__class__(x=data.x[kept], y=y[kept], edge_index=new_ei)
    return out


# --------------------------------------------------------------------------------------------
# Multi-hop QA world (ReMindRAG)
# --------------------------------------------------------------------------------------------

PASSES = ("original", "repeat", "para1", "para2")

MADE_BY, FOUNDED_BY, HQ_IN, BORN_IN = (
    "is made by",
    "was founded by",
    "is headquartered in",
    "was born in",
)
LOCATED_IN, PART_OF = "is located in", "is part of"
# The relation chain every question follows, hop by hop; a k-hop question follows the first k.
CHAIN = (MADE_BY, FOUNDED_BY, BORN_IN, LOCATED_IN, PART_OF)
HOPS = (2, 3, 4, 5)

# Question templates per pass and hop count; {p} is the product.
_TEMPLATES = {
    "original": {
        2: "Who founded the company that makes {p}?",
        3: "Where was the founder of the company that makes {p} born?",
        4: "In which country was the founder of the company that makes {p} born?",
        5: "On which continent was the founder of the company that makes {p} born?",
    },
    "para1": {
        2: "Name the person who started the firm manufacturing {p}.",
        3: "Name the birthplace of the person who started the firm manufacturing {p}.",
        4: "Name the country of birth of the person who started the firm manufacturing {p}.",
        5: "Name the continent of birth of the person who started the firm manufacturing {p}.",
    },
    "para2": {
        2: "Who was the founder of the company that produces {p}?",
        3: "Where was the founder of the company that produces {p} born?",
        4: "In which country was the founder of the company that produces {p} born?",
        5: "On which continent was the founder of the company that produces {p} born?",
    },
}
_TEMPLATES["repeat"] = _TEMPLATES["original"]


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    text: str
    title: str


@dataclass(frozen=True)
class Triple:
    subject: str
    relation: str
    object: str
    chunk_id: str


@dataclass(frozen=True)
class Question:
    """A multi-hop question: start at ``start``, follow ``relations`` (phrases as written in the
    chunk texts, subject → object), end at ``answer``."""

    text: str
    start: str
    relations: tuple[str, ...]
    answer: str
    hops: int
    pass_name: str


_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "kr", "tr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "", "n", "r", "l", "x", "s"]


def _names(count: int, used: set[str], rng: np.random.Generator) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        syllables = int(rng.integers(2, 4))
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
            for _ in range(syllables)
        )
        word = (word + _CODAS[rng.integers(len(_CODAS))]).capitalize()
        if word not in used:
            used.add(word)
            out.append(word)
    return out


def multihop_world(
    n_products: int = 20,
    hops: tuple[int, ...] = (2, 3),
    facts_per_chunk: int = 2,
    seed: int = 0,
    *,
    n_people: int = 30,
    n_companies: int = 20,
    n_cities: int = 12,
    n_items: int = 30,
    n_countries: int = 6,
    n_continents: int = 3,
) -> tuple[list[Chunk], list[Triple], dict[str, list[Question]]]:
    """A synthetic world of products, companies, people and cities with pseudo-word names.

    Facts: every item "P is made by C", every company "C was founded by X" (distinct founders) and
    "C is headquartered in Y", every person "X was born in Y" — 100 facts with the defaults, shuffled
    into chunks of ``facts_per_chunk``. Questions over the first ``n_products`` items, question i
    having ``hops[i % len(hops)]`` hops: 2 = "who founded the maker of P", 3 = "where was that founder
    born", 4 = "in which country was that founder born", 5 = "on which continent" (any of
    :data:`HOPS`). Only when some hop count is ≥ 4 does the world also get "Y is located in Z" for
    every city (``n_countries`` countries), and ≥ 5 "Z is part of K" for every country
    (``n_continents`` continents); 2/3-hop worlds are unchanged (same facts, chunks and questions).
    Note that ReMindRAG's default ``max_jumps=10`` is usually too few for 4-hop questions; raise it
    (``ReMindRAG(max_jumps=...)``, ``eff graph remindrag --max-jumps``). Returns
    ``(chunks, triples, questions)`` with ``questions[pass]`` for every pass in
    :data:`PASSES` (original templates, exact repeat, two paraphrase templates).
    """
    for name, v in (
        ("n_products", n_products),
        ("facts_per_chunk", facts_per_chunk),
        ("n_people", n_people),
        ("n_companies", n_companies),
        ("n_cities", n_cities),
        ("n_items", n_items),
        ("n_countries", n_countries),
        ("n_continents", n_continents),
    ):
        check_positive(name, v, integer=True)
    check_type("hops", hops, (tuple, list))
    if not hops or any(isinstance(h, bool) or h not in HOPS for h in hops):
        raise ValueError(f"hops must be a non-empty tuple of values in {HOPS}, got {hops!r}")
    if n_products > n_items:
        raise ValueError(f"n_products ({n_products}) must be <= n_items ({n_items})")
    if n_people < n_companies:
        raise ValueError("n_people must be >= n_companies (every company has its own founder)")
    rng = make_rng(seed, 10)
    used: set[str] = set()
    people, companies = _names(n_people, used, rng), _names(n_companies, used, rng)
    cities, items = _names(n_cities, used, rng), _names(n_items, used, rng)
    maker = {p: companies[int(rng.integers(n_companies))] for p in items}
    founders = rng.permutation(n_people)[:n_companies]
    founder = {c: people[int(i)] for c, i in zip(companies, founders, strict=True)}
    hq = {c: cities[int(rng.integers(n_cities))] for c in companies}
    birth = {x: cities[int(rng.integers(n_cities))] for x in people}
    facts = (
        [(p, MADE_BY, maker[p]) for p in items]
        + [(c, FOUNDED_BY, founder[c]) for c in companies]
        + [(c, HQ_IN, hq[c]) for c in companies]
        + [(x, BORN_IN, birth[x]) for x in people]
    )
    # drawn after everything above, and only when needed, so 2/3-hop worlds stay bit-identical
    follow: dict[str, dict[str, str]] = {MADE_BY: maker, FOUNDED_BY: founder, BORN_IN: birth}
    if max(hops) >= 4:
        countries = _names(n_countries, used, rng)
        country = {y: countries[int(rng.integers(n_countries))] for y in cities}
        facts += [(y, LOCATED_IN, country[y]) for y in cities]
        follow[LOCATED_IN] = country
        if max(hops) >= 5:
            continents = _names(n_continents, used, rng)
            continent = {z: continents[int(rng.integers(n_continents))] for z in countries}
            facts += [(z, PART_OF, continent[z]) for z in countries]
            follow[PART_OF] = continent
    facts = [facts[int(i)] for i in rng.permutation(len(facts))]
    chunks: list[Chunk] = []
    triples: list[Triple] = []
    for start in range(0, len(facts), facts_per_chunk):
        cid = str(len(chunks) + 1)
        group = facts[start : start + facts_per_chunk]
        text = " ".join(f"{s} {r} {o}." for s, r, o in group)
        title = "Facts about " + " and ".join(s for s, _, _ in group)
        chunks.append(Chunk(cid, text, title))
        triples += [Triple(s, r, o, cid) for s, r, o in group]
    questions: dict[str, list[Question]] = {}
    for pass_name in PASSES:
        qs = []
        for i, p in enumerate(items[:n_products]):
            h = hops[i % len(hops)]
            relations = CHAIN[:h]
            answer = p
            for rel in relations:
                answer = follow[rel][answer]
            text = _TEMPLATES[pass_name][h].format(p=p)
            qs.append(Question(text, p, relations, answer, h, pass_name))
        questions[pass_name] = qs
    return chunks, triples, questions

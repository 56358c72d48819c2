"""Tests of eff_theory.pnn_identifiability: counts, exact mod-p ranks (known exceptional
dimensions), verdicts, exact shallow recovery, the torch parts (with the extra) and bad input."""

import math

import numpy as np
import pytest

from eff_shared.testing import assert_expected_verdicts
from eff_theory import pnn_identifiability as pnn
from eff_theory.pnn_identifiability import (
    DEFAULT_PRIME,
    alignment_error,
    ambient_dimension,
    check_identifiability,
    expected_dimension,
    identify_shallow,
    jacobian_ranks,
    kruskal_block_condition,
    neurovariety_dimension,
    num_parameters,
    rank_mod_p,
    shallow_tensor,
    symmetry_dimension,
)


def test_counts():
    assert num_parameters((4, 3, 2)) == 12 + 6
    assert num_parameters((4, 3, 2), bias=True) == 3 * 5 + 2 * 4
    assert symmetry_dimension((2, 3, 2, 3, 4)) == 8
    assert ambient_dimension((3, 5, 1), (4,)) == math.comb(6, 4)
    assert ambient_dimension((2, 2, 2), (3,), bias=True) == 2 * math.comb(5, 3)
    assert ambient_dimension((2, 3, 4, 5), (3, 3)) == 5 * math.comb(10, 9)
    assert expected_dimension((2, 3, 2, 3, 4), (2, 2, 2)) == 22
    assert expected_dimension((2, 4, 6, 1), (4, 4)) == 17  # P - s = 28 > ambient 17
    assert ambient_dimension((4, 3, 2), 2) == ambient_dimension((4, 3, 2), (2,))  # int shorthand


def test_rank_mod_p_is_exact():
    p = 101
    assert rank_mod_p([[1, 2], [2, 4]], p) == 1
    assert rank_mod_p([[p, 0], [0, 1]], p) == 1  # p ≡ 0
    assert rank_mod_p([[3, 1], [1, 34]], p) == 1  # det = 101 ≡ 0 mod 101, rank 2 over Q
    rng = np.random.default_rng(0)
    for _ in range(20):
        m, n, r = rng.integers(2, 9, size=3)
        r = min(r, m, n)
        A = rng.integers(-3, 4, size=(m, r)) @ rng.integers(-3, 4, size=(r, n))
        assert rank_mod_p(A, DEFAULT_PRIME) == np.linalg.matrix_rank(A.astype(float))


def test_modular_jacobian_equals_the_integer_jacobian_reduced_mod_p():
    # With small integer parameters and points the float64 forward mode is exact integer arithmetic,
    # so the mod-p Jacobian must be its reduction; this checks the overflow-free mod-p kernels.
    ws, rs, p = (2, 3, 2, 2), (3, 2), DEFAULT_PRIME
    rng = np.random.default_rng(1)
    params = [
        (rng.integers(-3, 4, (ws[i], ws[i - 1])), rng.integers(-3, 4, ws[i])) for i in range(1, 4)
    ]
    X = rng.integers(-3, 4, (2, 9))
    J_float = pnn.evaluation_jacobian(
        ws, rs, True, [(W.astype(float), b.astype(float)) for W, b in params], X.astype(float), None
    )
    J_mod = pnn.evaluation_jacobian(ws, rs, True, [(W % p, b % p) for W, b in params], X % p, p)
    assert np.abs(J_float).max() < 2**52
    np.testing.assert_array_equal(J_float.astype(np.int64) % p, J_mod)

    # And the float Jacobian matches central finite differences of the network.
    def f(theta):
        h, off = X.astype(float), 0
        for i, (W, b) in enumerate(params):
            nW = W.size
            Wt = theta[off : off + nW].reshape(W.shape)
            bt = theta[off + nW : off + nW + len(b)]
            off += nW + len(b)
            h = Wt @ h + bt[:, None]
            if i < len(rs):
                h = h ** rs[i]
        return h.ravel()

    theta0 = np.concatenate([np.concatenate([W.ravel(), b]) for W, b in params]).astype(float)
    eps = 1e-6
    fd = np.stack(
        [(f(theta0 + eps * e) - f(theta0 - eps * e)) / (2 * eps) for e in np.eye(theta0.size)], 1
    )
    assert np.linalg.norm(J_float - fd) < 1e-7 * np.linalg.norm(J_float)


@pytest.mark.parametrize(
    ("widths", "degrees", "expected", "exact"),
    [
        ((3, 5, 1), (4,), 15, 14),  # Alexander–Hirschowitz
        ((5, 7, 1), (3,), 35, 34),  # Alexander–Hirschowitz
        ((4, 9, 1), (4,), 35, 34),  # Alexander–Hirschowitz
        ((4, 3, 1), (2,), 10, 9),  # quadratic forms of rank <= 3 in 4 variables
        ((2, 3, 2, 3, 4), (2, 2, 2), 22, 16),  # KTB's defective example
        ((2, 4, 6, 7), (4, 2), 63, 60),  # every block passes Kruskal, still defective
        ((3, 3, 3), (2,), 15, 15),
        ((2, 2, 2, 2), (2, 2), 8, 8),
        ((3, 3, 3, 3), (2, 2), 21, 21),
        ((4, 3, 2, 2), (2, 2), 17, 17),
        ((2, 4, 8), (4,), 36, 36),
        ((2, 3, 4, 5), (3, 3), 31, 31),
    ],
)
def test_known_neurovariety_dimensions(widths, degrees, expected, exact):
    assert expected_dimension(widths, degrees) == expected
    assert neurovariety_dimension(widths, degrees) == exact


def test_biased_dimensions_and_rank_bounds():
    assert neurovariety_dimension((2, 2, 2), (3,), bias=True) == 10
    assert neurovariety_dimension((4, 3, 2), (3,), bias=True) == 20
    # Every trial's rank is a lower bound of the generic rank: never above P - s or the ambient space.
    ranks = jacobian_ranks((3, 5, 1), (4,), trials=3, seed=5)
    assert ranks == [14, 14, 14]
    assert jacobian_ranks((3, 5, 1), (4,), seed=5) == jacobian_ranks((3, 5, 1), (4,), seed=5)


def test_float_rank_warns_at_high_degree():
    with pytest.warns(UserWarning, match="float rank unreliable"):
        jacobian_ranks((2, 3, 4, 5), (3, 3), method="float", trials=1)
    assert jacobian_ranks((4, 3, 2), (2,), method="float", trials=1) == [15]


@pytest.mark.parametrize(
    ("widths", "degrees", "verdict"),
    [
        ((4, 3, 2), (2,), "identifiable"),
        ((4, 3, 2, 2), (2, 2), "identifiable"),
        ((2, 4, 8), (4,), "identifiable"),
        ((3, 3, 3, 1), (2, 2), "not_identifiable"),
        ((2, 4, 6, 1), (4, 4), "not_identifiable"),
        ((2, 4, 6, 7), (4, 2), "not_identifiable"),
        ((2, 3, 4, 5), (3, 3), "finitely_identifiable"),
    ],
)
def test_identifiability_verdicts(widths, degrees, verdict):
    assert check_identifiability(widths, degrees).verdict == verdict


def test_verdict_evidence():
    rep = check_identifiability((2, 4, 6, 1), (4, 4), numeric=False)
    assert (
        rep.verdict == "not_identifiable" and "exceeds the ambient dimension 17" in rep.reasons[0]
    )
    rep = check_identifiability((2, 4, 6, 7), (4, 2))
    assert all(rep.block_ok) and not rep.dense_inputs and rep.dim == 60 and rep.ranks == [60, 60]
    rep = check_identifiability((3, 3, 2), (1,))
    assert rep.verdict == "not_identifiable" and any("GL symmetry" in r for r in rep.reasons)
    rep = check_identifiability((4, 3, 2), (2,), numeric=False)
    assert rep.verdict == "identifiable" and rep.dim is None
    rep = check_identifiability((2, 2, 2), (3,), bias=True)
    assert rep.verdict == "finitely_identifiable"  # Kruskal route is for homogeneous networks only
    assert check_identifiability((2, 3, 4, 5), (3, 3), numeric=False).verdict == "unknown"


def test_kruskal_block_condition():
    assert kruskal_block_condition(2, 4, 8, 4)  # 4·2 + 4 = 12 >= 12
    assert not kruskal_block_condition(2, 4, 3, 4)  # 8 + 3 = 11 < 12
    assert kruskal_block_condition(3, 3, 2, 2)  # non-increasing, r = 2, d_out >= 2
    assert not kruskal_block_condition(3, 3, 1, 2)  # r = 2 needs d_out >= 2
    assert kruskal_block_condition(3, 3, 1, 3)  # r >= 3 and d_hidden >= 2: nothing needed
    assert kruskal_block_condition(5, 1, 1, 2)  # one neuron: rank-one term
    assert not kruskal_block_condition(3, 2, 3, 1)  # degree 1: GL symmetry


def test_shallow_tensor_contracts_to_the_network():
    rng = np.random.default_rng(2)
    W1, W2 = rng.normal(size=(4, 3)), rng.normal(size=(2, 4))
    T = shallow_tensor(W1, W2, 3)
    assert T.shape == (3, 3, 3, 2)
    x = rng.normal(size=3)
    out = T
    for _ in range(3):
        out = np.tensordot(x, out, axes=(0, 0))
    np.testing.assert_allclose(out, W2 @ (W1 @ x) ** 3)
    np.testing.assert_allclose(T, np.swapaxes(T, 0, 2))


@pytest.mark.parametrize(
    ("d0", "d1", "d2", "r"), [(5, 4, 3, 2), (6, 6, 1, 3), (3, 5, 4, 4), (8, 6, 2, 3)]
)
def test_exact_shallow_recovery(d0, d1, d2, r):
    rng = np.random.default_rng(d0 * 100 + d1)
    W1, W2 = rng.normal(size=(d1, d0)), rng.normal(size=(d2, d1))
    W1_hat, W2_hat = identify_shallow(shallow_tensor(W1, W2, r), d1, seed=0)
    assert alignment_error(W1, W2, W1_hat, W2_hat, r) <= 1e-8
    np.testing.assert_allclose(
        shallow_tensor(W1_hat, W2_hat, r), shallow_tensor(W1, W2, r), atol=1e-8
    )
    again = identify_shallow(shallow_tensor(W1, W2, r), d1, seed=0)
    np.testing.assert_array_equal(again[0], W1_hat)


def test_alignment_error_is_symmetry_invariant_and_detects_differences():
    rng = np.random.default_rng(3)
    W1, W2 = rng.normal(size=(4, 3)), rng.normal(size=(2, 4))
    perm = rng.permutation(4)
    D = rng.uniform(0.5, 2, size=4) * rng.choice([-1, 1], size=4)
    W1s, W2s = D[:, None] * W1[perm], W2[:, perm] * D ** (-3)
    assert alignment_error(W1, W2, W1s, W2s, 3) < 1e-12
    assert alignment_error(W1, W2, W1 + 0.1, W2, 3) > 1e-2


def test_als_runs_without_guarantee_on_an_easy_case():
    rng = np.random.default_rng(4)
    W1, W2 = rng.normal(size=(3, 5)), rng.normal(size=(3, 3))
    W1_hat, W2_hat = identify_shallow(
        shallow_tensor(W1, W2, 2), 3, method="als", seed=0, als_iterations=300
    )
    assert alignment_error(W1, W2, W1_hat, W2_hat, 2) < 1e-3


def test_identify_shallow_bad_input():
    rng = np.random.default_rng(5)
    T = shallow_tensor(rng.normal(size=(6, 4)), rng.normal(size=(1, 6)), 4)
    with pytest.raises(ValueError, match="als"):
        identify_shallow(T, 6)  # (4,6,1) r=4: Kruskal holds but no Jennrich grouping
    bad = shallow_tensor(rng.normal(size=(3, 4)), rng.normal(size=(2, 3)), 2)
    bad[0, 1, 0] += 1.0
    with pytest.raises(ValueError, match="partially symmetric"):
        identify_shallow(bad, 3)
    with pytest.raises(ValueError, match="hidden_width"):
        identify_shallow(T, 0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: num_parameters((3,)), "at least 2"),
        (lambda: num_parameters((3, 0, 2)), "width"),
        (lambda: expected_dimension((3, 3, 2), (2, 2)), "len\\(degrees\\)"),
        (lambda: expected_dimension((3, 3, 2), (2.5,)), "degree"),
        (lambda: expected_dimension((3, 3, 2), (0,)), "degree"),
        (lambda: neurovariety_dimension((3, 3, 2), (2,), prime=100), "prime"),
        (lambda: neurovariety_dimension((3, 3, 2), (2,), prime=2_147_483_659), "prime"),
        (lambda: neurovariety_dimension((6, 6, 6), (4,), max_rows=500), "monomials"),
        (lambda: neurovariety_dimension((3, 3, 2), (2,), method="svd"), "method"),
    ],
)
def test_bad_architecture_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- torch extra


def test_torch_names_hint_the_extra_without_torch(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r'pip install "eff-theory\[torch\]"'):
        pnn.PolynomialNetwork  # noqa: B018


def test_black_box_network_to_tensor_to_weights():
    torch = pytest.importorskip("torch")
    from eff_theory.pnn_identifiability import PolynomialNetwork, shallow_tensor_from_function

    net = PolynomialNetwork((3, 5, 4), (4,), seed=0)
    W1, W2 = (w.detach().numpy() for w in net.weights)
    T = shallow_tensor_from_function(net, 3, 4)
    np.testing.assert_allclose(T, shallow_tensor(W1, W2, 4), atol=1e-12)
    W1_hat, W2_hat = identify_shallow(T, 5)
    assert alignment_error(W1, W2, W1_hat, W2_hat, 4) <= 1e-8
    deep = PolynomialNetwork((4, 3, 2, 2), (2, 2), bias=True, seed=1)
    x = torch.randn(6, 4, dtype=torch.float64)
    h = x
    for i, (W, b) in enumerate(zip(deep.weights, deep.biases, strict=True)):
        h = h @ W.T + b
        h = h**2 if i < 2 else h
    torch.testing.assert_close(deep(x), h)
    same = PolynomialNetwork((4, 3, 2, 2), (2, 2), bias=True, seed=1)
    torch.testing.assert_close(same.weights[0], deep.weights[0])


def test_quick_reproduction_claims_hold():
    from eff_theory.reproduce.pnn_identifiability import run

    result = run("quick", seed=0)
    assert result.error is None and result.passed and len(result.claims) == 5
    assert_expected_verdicts(result)  # checks pass; paper claims as expected
    assert any(c.kind == "paper" and c.headline for c in result.claims)
    assert result.paper_title and result.headline


def test_cli_report_and_bad_input(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_theory.cli import app

    out = tmp_path / "pnn.json"
    args = [
        "pnn-identifiability",
        "--widths",
        "2,3,2,3,4",
        "--degrees",
        "2,2,2",
        "--json",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())["rows"][0]
    assert row["verdict"] == "not_identifiable" and row["exact dim"] == 16
    assert "defective" in result.output
    bad = CliRunner().invoke(app, ["pnn-identifiability", "--widths", "4,3,2", "--degrees", "2,2"])
    assert bad.exit_code == 2 and "len(degrees)" in " ".join(bad.output.split())

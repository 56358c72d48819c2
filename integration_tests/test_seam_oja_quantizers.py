"""Seam: eff-theory's quantized Oja grids vs eff-kernels' ParetoQ quantizers on the same stream.

``eff_theory.quantized_oja.LinearQuantizer(β)`` is the grid {δk : k = −2^{β−1} … 2^{β−1} − 1},
δ = 2^{2−β}, with **stochastic** rounding (up with probability equal to the fractional part, one
uniform per element from the generator). ``eff_kernels.paretoq.fake_quant`` with the LSQ quantizer at
β ∈ {2, 3, 4} bits and scale α = δ is α·clamp(round(x/α), −2^{β−1}, 2^{β−1} − 1): **the same grid**,
same saturation, but **round-to-nearest** (deterministic). What ties them, exactly:

* stochastic rounding = nearest rounding of a dithered input: with the uniform U the theory
  quantizer draws, Q_L(x) = LSQ(x + δ(½ − U)) (clipping first or clamping after give the same
  point). Fed the same uniforms, ``quantized_oja`` returns **bit-identical** estimates with either;
* without the dither (ParetoQ as it is) the rounding is biased: with the paper's step size every
  update coordinate |η·ḡ| < δ/2 rounds to 0, so the iterate never leaves its quantized start, while
  the unbiased stochastic rounding converges — the paper's reason for stochastic rounding;
* ParetoQ's *default* 2-bit quantizer is SEQ (no zero level): with α = 2δ its grid is the linear
  grid shifted by δ/2, SEQ(x) = LSQ(x − δ/2) + δ/2 (grid placement, not resolution, differs).

ParetoQ stops at 4 bits and eff-theory's linear grid starts at 2, so the comparison runs at 2–4 bits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eff_kernels.paretoq import fake_quant
from eff_theory.quantized_oja import (
    LinearQuantizer,
    QuantizedOja,
    oja_learning_rate,
    quantized_oja,
    sin2_error,
    spiked_covariance_stream,
)


class ParetoQGrid:
    """eff-theory's ``Quantizer`` protocol on top of ParetoQ's LSQ ``fake_quant`` (α = δ).

    ``dither=True`` draws one uniform per element from the generator, exactly as
    ``LinearQuantizer`` does, and rounds x + δ(½ − U) to the nearest level (= stochastic rounding);
    ``dither=False`` is ParetoQ's own round-to-nearest and draws nothing.
    """

    def __init__(self, bits: int, *, dither: bool) -> None:
        self.bits, self.dither = bits, dither
        self.delta = 2.0 ** (2 - bits)

    def quantize(self, x, rng=None) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.dither:
            x = x + self.delta * (0.5 - np.random.default_rng(rng).random(x.shape))
        alpha = torch.tensor(self.delta, dtype=torch.float64)
        return fake_quant(torch.from_numpy(x), alpha, self.bits, "lsq").numpy()


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_same_grid_and_stochastic_rounding_is_dithered_nearest_rounding(bits):
    lin = LinearQuantizer(bits)
    levels = np.unique(ParetoQGrid(bits, dither=False).quantize(np.linspace(-4, 4, 4001)))
    assert np.array_equal(levels, lin.grid())
    x = np.random.default_rng(1).normal(0.0, 1.5, size=50_000)  # ~10 % saturate at 2 bits
    assert np.array_equal(lin.quantize(x, rng=7), ParetoQGrid(bits, dither=True).quantize(x, rng=7))


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_quantized_oja_gives_the_same_estimate_with_either_quantizer(bits):
    stream = spiked_covariance_stream(2000, 8, n_trials=4, rng=0)
    eta = oja_learning_rate(2000, 20, stream.eigengap)
    kw = dict(n_batches=20, learning_rate=eta, rng=3, on_zero="keep")
    theory = quantized_oja(stream.X, quantizer=LinearQuantizer(bits), **kw)
    kernels = quantized_oja(stream.X, quantizer=ParetoQGrid(bits, dither=True), **kw)
    assert np.array_equal(theory, kernels)  # bit-identical, all 4 runs
    # The estimator class too (fit with η from the eigengap).
    fits = [
        QuantizedOja(8, quantizer=q, n_batches=20, eigengap=stream.eigengap, rng=5, on_zero="keep")
        .fit(stream.X[0])
        .components_
        for q in (LinearQuantizer(bits), ParetoQGrid(bits, dither=True))
    ]
    assert np.array_equal(*fits)


def test_nearest_rounding_stalls_where_stochastic_rounding_converges():
    n, d, b, bits = 4000, 8, 40, 4
    stream = spiked_covariance_stream(n, d, rng=0)
    eta = oja_learning_rate(n, b, stream.eigengap)
    kw = dict(n_batches=b, learning_rate=eta, rng=3, on_zero="keep")
    fp = quantized_oja(stream.X, n_batches=b, learning_rate=eta, rng=3)
    stochastic = quantized_oja(stream.X, quantizer=LinearQuantizer(bits), **kw)
    nearest = quantized_oja(stream.X, quantizer=ParetoQGrid(bits, dither=False), **kw)
    u0 = np.random.default_rng(3).standard_normal(d)  # quantized_oja's start (same generator)
    start = ParetoQGrid(bits, dither=False).quantize(u0 / np.linalg.norm(u0))
    errs = {
        name: float(sin2_error(u, stream.v1))
        for name, u in [("fp64", fp), ("stochastic", stochastic), ("nearest", nearest)]
    }
    print(
        {k: round(v, 4) for k, v in errs.items()}, "start", round(sin2_error(start, stream.v1), 4)
    )
    # Measured (seed 0): fp64 0.0017, stochastic 0.134, nearest 0.962 = the start's.
    assert np.array_equal(nearest, start)  # never moved: every update rounded to zero
    assert errs["stochastic"] < 0.5 * errs["nearest"]
    assert errs["fp64"] < errs["stochastic"]


def test_paretoq_2bit_seq_grid_is_the_linear_grid_shifted_by_half_a_step():
    lin = LinearQuantizer(2)
    delta = lin.delta  # 1.0: grid {−2, −1, 0, 1}
    x = torch.from_numpy(np.random.default_rng(2).uniform(-3, 3, size=20_001))
    seq = fake_quant(x, torch.tensor(2 * delta, dtype=torch.float64), 2)  # default: SEQ
    lsq = fake_quant(x - delta / 2, torch.tensor(delta, dtype=torch.float64), 2, "lsq")
    assert torch.equal(seq, lsq + delta / 2)
    assert np.array_equal(np.unique(seq.numpy()), lin.grid() + delta / 2)  # {±½, ±3⁄2}: no zero

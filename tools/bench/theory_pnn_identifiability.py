#!/usr/bin/env python
"""Benchmark: eff-theory's PNN identifiability — exact mod-p ranks and shallow recovery.

1. Jacobian rank of the spec's 12 reference architectures: exact mod-p elimination vs float64 SVD
   (time ratio and agreement with the exact dimension, same parameters drawn per method).
2. One small case against an exact rational rank (sympy ``Matrix.rank``, if installed) on the same
   integer Jacobian: the speed-up of modular arithmetic.
3. Shallow recovery on the spec's 4 cases: Jennrich vs CP-ALS (time ratio and term errors).

Medians of CPU time, BLAS pinned to one thread. Informational: exit status 1 only when the mod-p
rank disagrees with the reference dimension or Jennrich's term error exceeds 1e-8.

    uv run --frozen python tools/bench/theory_pnn_identifiability.py [--rounds 3]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from eff_theory import pnn_identifiability as pnn  # noqa: E402
from eff_theory.reproduce.pnn_identifiability import DIMENSION_TABLE, RECOVERY_CASES  # noqa: E402


def cpu(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn(*args, **kwargs)
    return time.process_time() - t0, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ok = True
    warnings.simplefilter("ignore", UserWarning)  # float ranks at R >= 6 warn by design
    with threadpool_limits(1):
        t_mod, t_float, agree = [], [], 0
        for widths, degrees, _, exact, _ in DIMENSION_TABLE:
            tm, tf = [], []
            for _ in range(args.rounds):
                dt, r_mod = cpu(pnn.jacobian_ranks, widths, degrees, trials=1)
                tm.append(dt)
                dt, r_float = cpu(pnn.jacobian_ranks, widths, degrees, method="float", trials=1)
                tf.append(dt)
            ok &= r_mod[0] == exact
            agree += r_float[0] == exact
            t_mod.append(statistics.median(tm))
            t_float.append(statistics.median(tf))
        print(
            f"ranks of {len(DIMENSION_TABLE)} architectures: mod p {sum(t_mod) * 1e3:.1f} ms, float64 SVD "
            f"{sum(t_float) * 1e3:.1f} ms (mod p / float = {sum(t_mod) / sum(t_float):.2f}x); float rank "
            f"equals the exact dimension in {agree}/{len(DIMENSION_TABLE)}"
        )

        if importlib.util.find_spec("sympy") is not None:
            import sympy

            ws, rs = (4, 3, 1), (2,)
            rng = np.random.default_rng(1)  # seed 0 draws a zero output weight (a dead neuron)
            params = [
                (rng.integers(-50, 51, (ws[i], ws[i - 1])).astype(float), None) for i in (1, 2)
            ]
            X = rng.integers(-50, 51, (4, 15)).astype(float)  # exact in float64
            J = pnn.evaluation_jacobian(ws, rs, False, params, X, None).astype(np.int64)
            dt_mod, r_mod = cpu(pnn.rank_mod_p, J)
            dt_q, r_q = cpu(sympy.Matrix(J.tolist()).rank)
            print(
                f"(4,3,1) r=2 integer Jacobian {J.shape}: rank mod p {r_mod} in {dt_mod * 1e3:.2f} ms, "
                f"sympy rational rank {r_q} in {dt_q * 1e3:.0f} ms ({dt_q / dt_mod:.0f}x slower)"
            )
        else:
            print("sympy not installed: exact rational rank skipped")

        t_j, t_a, err_j, err_a = [], [], [], []
        for i, (d0, d1, d2, r) in enumerate(RECOVERY_CASES):
            rng = np.random.default_rng(i)
            W1, W2 = rng.standard_normal((d1, d0)), rng.standard_normal((d2, d1))
            T = pnn.shallow_tensor(W1, W2, r)
            dt, (A, B) = cpu(pnn.identify_shallow, T, d1, seed=0)
            t_j.append(dt)
            err_j.append(pnn.alignment_error(W1, W2, A, B, r))
            dt, (A, B) = cpu(pnn.identify_shallow, T, d1, method="als", seed=0, als_iterations=500)
            t_a.append(dt)
            err_a.append(pnn.alignment_error(W1, W2, A, B, r))
        ok &= max(err_j) <= 1e-8
        print(
            f"shallow recovery, {len(RECOVERY_CASES)} cases: Jennrich {sum(t_j) * 1e3:.1f} ms (max term error "
            f"{max(err_j):.1e}), CP-ALS 500 iterations {sum(t_a) * 1e3:.0f} ms (max term error "
            f"{max(err_a):.1e}); ALS / Jennrich time = {sum(t_a) / sum(t_j):.0f}x"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

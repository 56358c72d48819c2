"""Benchmarks of eff-vision's adaptation methods (issue 11), as ratios measured in the same run.

- RankMatch: PRR loss time / KL time at C = 6 and C = 100 (spec target: ≤ 3× at C = 100).
- LCoTTA: step time / EATA step time with the toy's 384 LayerNorm affines and with ~50k adapted
  parameters (spec target ≤ 1.3 with the Gram trick; the toy is dominated by per-step overhead).
- FedPhoenix: one PhoenixReset call / one local epoch of a client (spec: "about nothing").
- RobIA: time per frame / full fine-tuning and / BN-adapt (spec goal ≤ 0.7 × full fine-tuning),
  and SGBM alone per frame (untrained models: the ratio does not depend on the weights).

CPU seconds, medians over interleaved rounds, torch and BLAS pinned to one thread.
Run: ``uv run python tools/bench/vision_adaptation.py``.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch
from threadpoolctl import threadpool_limits
from torch import nn


def median_cpu(jobs: dict[str, Callable[[], object]], rounds: int = 5) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            t0 = time.process_time()
            job()
            samples[name].append(time.process_time() - t0)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_prr() -> None:
    from eff_vision.rankmatch import prr_loss

    for c in (6, 100):
        g = torch.Generator().manual_seed(0)
        p = torch.randn(256, c, generator=g).softmax(-1)
        d = torch.randn(256, c, generator=g).softmax(-1)

        def prr(p=p, d=d) -> None:
            for _ in range(20):
                prr_loss(p, d, margin=False)

        def kl(p=p, d=d) -> None:
            for _ in range(20):
                torch.nn.functional.kl_div(p.log(), d, reduction="batchmean")

        med = median_cpu({"prr": prr, "kl": kl})
        print(
            f"RankMatch C={c:3d}: PRR / KL = {med['prr'] / med['kl']:.2f}  (target <= 3 at C=100)"
        )


def bench_lcotta() -> None:
    from eff_vision.lcotta import LCoTTA
    from eff_vision.reproduce.lcotta import LNDigitsMLP
    from eff_vision.tta import EATA

    x = [torch.rand(32, 1, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(60)]
    wide = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.LayerNorm(256), nn.ReLU(),
                         nn.Linear(256, 128), nn.LayerNorm(128), nn.ReLU(), nn.Linear(128, 10))  # fmt: skip
    for label, model, params in (
        ("384 LN affines", LNDigitsMLP(), "norm"),
        ("~51k params", wide, "all"),
    ):
        kw = dict(lr=0.02, e_margin=2.3, d_margin=1.0, params=params)
        ea = EATA(copy.deepcopy(model), **kw)
        lc = LCoTTA(copy.deepcopy(model), rank=4, window=30, record_every=3, **kw)

        def run(m) -> None:
            for xb in x:
                m(xb)

        med = median_cpu({"eata": lambda m=ea: run(m), "lcotta": lambda m=lc: run(m)}, rounds=3)
        print(f"LCoTTA {label} ({lc.num_adapted()} adapted): step time / EATA = {med['lcotta'] / med['eata']:.2f}"
              "  (target <= 1.3)")  # fmt: skip


def bench_fedphoenix() -> None:
    from eff_vision.fedphoenix import PhoenixReset
    from eff_vision.reproduce.fedphoenix import FedDigitsCNN

    model = FedDigitsCNN()
    reset = PhoenixReset(theta=2 / 32, stop_round=100)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(72, 1, 8, 8), torch.randint(0, 10, (72,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def epoch() -> None:
        for idx in torch.randperm(72).split(16):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()

    med = median_cpu({"reset": lambda: reset(model, 0, gen), "epoch": epoch}, rounds=9)
    print(f"FedPhoenix: reset / one local epoch (72 samples) = {med['reset'] / med['epoch']:.3f}")


def bench_robia() -> None:
    from eff_vision.data.stereo import SyntheticStereo, TinyStereoNet
    from eff_vision.robia import AttExMoE, FullFineTune, RobIA, StereoBNAdapt, _sgbm_batch

    torch.manual_seed(0)
    src = TinyStereoNet(24).eval()
    moe = copy.deepcopy(src)
    moe.moe = AttExMoE(16)
    b = SyntheticStereo().render(8, seed=0)
    frames = [
        (torch.from_numpy(b.left[i])[None, None], torch.from_numpy(b.right[i])[None, None])
        for i in range(8)
    ]
    methods = {
        "bn_adapt": StereoBNAdapt(copy.deepcopy(src)),
        "full_ft": FullFineTune(copy.deepcopy(src)),
        "robia": RobIA(copy.deepcopy(moe), "moe"),
        "robia_no_teacher": RobIA(copy.deepcopy(moe), "moe", use_teacher=False),
    }

    def run(m) -> None:
        with torch.no_grad():
            for f in frames:
                m(*f)

    def sgbm() -> None:
        for f in frames:
            _sgbm_batch(*f)

    jobs = {k: (lambda m=m: run(m)) for k, m in methods.items()} | {"sgbm": sgbm}
    med = median_cpu(jobs, rounds=3)
    print(f"RobIA: time / full fine-tuning = {med['robia'] / med['full_ft']:.2f} (goal <= 0.7), "
          f"/ BN-adapt = {med['robia'] / med['bn_adapt']:.2f}; without teacher / full FT = "
          f"{med['robia_no_teacher'] / med['full_ft']:.2f}; SGBM {1e3 * med['sgbm'] / len(frames):.1f} ms/frame")  # fmt: skip


def main() -> None:
    torch.set_num_threads(1)
    with threadpool_limits(1):
        bench_prr()
        bench_lcotta()
        bench_fedphoenix()
        bench_robia()


if __name__ == "__main__":
    main()

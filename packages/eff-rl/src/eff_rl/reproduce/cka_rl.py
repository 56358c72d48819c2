"""Reproduction ``rl.cka_rl``: CKA-RL vs fine-tuning and training from scratch on CartPole ``flip4``.

Task sequence (spec): T0 standard, T1 actions flipped, T2 half pole length 0.8, T3 flipped with
length 0.8. Consecutive tasks conflict and T2 resembles T0, so a knowledge pool that can recall
θ_0 should transfer forward where fine-tuning transfers negatively. T0 is identical for every
method (a plain actor trained from scratch with the same seed): it is trained once per seed and
every method resumes from its checkpoint.

Paper claims (the spec's "(a)" thresholds 1-4, ``specs/claims.md``): forward transfer and mean AUC
vs fine-tuning, final performance (pool 3 and pool 2), each per seed on the same seed's runs and
judged on the median over seeds 0-5 (six) in full mode; quick mode (one seed, 4k steps per task)
prints them without judging them. Checks (mechanism and memory, any scale): the pool never holds
more than pool_size vectors, its bytes, and its size per task.

Full mode also sweeps the number of env steps per task (issue #26: the sign of the gains over
fine-tuning depends on it): :func:`steps_sweep` reruns from scratch, fine-tune and CKA-RL (pool 3)
at :data:`STEPS_SWEEP` steps per task on the same seeds (the 40k runs are the main ones) and the
FT and AUC gains are reported per budget (table, series, paper claims per budget).
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from eff_rl.metrics import auc, forgetting, forward_transfer, success_curve
from eff_shared.reproduce import Claim, Mode, Result, claim_seeds, paper_claim

__all__ = ["STEPS_SWEEP", "CKARLReproConfig", "RunConfig", "run", "steps_sweep", "summarise"]

SUCCESS_RETURN = 195.0
BINS = 20


@dataclass(frozen=True)
class CKARLReproConfig:
    """The task sequence, the env-step budget per task and PPO's settings (defaults: full mode's;
    quick mode runs ``QUICK_STEPS`` per task); ``workers`` processes run the (method, seed) runs
    (``None``: min(2, CPUs))."""

    sequence: str = "flip4"
    steps_per_task: int = 40_000
    n_envs: int = 4
    n_steps: int = 128
    n_minibatches: int = 4
    n_epochs: int = 4
    lr: float = 1e-3
    alpha_lr: float = 1e-3
    eval_episodes: int = 10
    anneal_lr: bool = (
        True  # the official code anneals both learning rates; False reproduces the prototype
    )
    # official Finetune: CnnSimpleAgent.load(prev, load_critic=False); False carries the critic
    finetune_reset_critic: bool = True
    workers: int | None = None

    def train_kwargs(self) -> dict[str, Any]:
        """The keywords of :func:`eff_rl.ppo.train_sequence` (PPO's settings included)."""
        return dict(
            n_envs=self.n_envs,
            n_steps=self.n_steps,
            n_minibatches=self.n_minibatches,
            n_epochs=self.n_epochs,
            lr=self.lr,
            alpha_lr=self.alpha_lr,
            eval_episodes=self.eval_episodes,
            anneal_lr=self.anneal_lr,
            finetune_reset_critic=self.finetune_reset_critic,
        )


#: the former name, kept for existing callers
RunConfig = CKARLReproConfig


def _job(args: tuple[CKARLReproConfig, str, int, int, str]) -> dict[str, Any]:
    """One (method, seed, pool size) run resumed from the seed's task-0 checkpoint (worker process)."""
    from eff_rl.envs import task_sequence
    from eff_rl.ppo import train_sequence
    from eff_shared.torch import threads

    cfg, method, seed, pool_size, ckpt = args
    with threads(1):
        res = train_sequence(
            task_sequence(cfg.sequence),
            method,
            cfg.steps_per_task,
            seed,
            pool_size,  # type: ignore[arg-type]
            resume_from=ckpt,
            **cfg.train_kwargs(),
        )
    return res.to_dict()


def _task0(args: tuple[CKARLReproConfig, int, str]) -> str:
    from eff_rl.envs import task_sequence
    from eff_rl.ppo import train_sequence
    from eff_shared.torch import threads

    cfg, seed, out = args
    with threads(1):
        train_sequence(
            task_sequence(cfg.sequence),
            "finetune",
            cfg.steps_per_task,
            seed,
            checkpoint_dir=out,
            stop_after=0,
            **cfg.train_kwargs(),
        )
    return str(Path(out) / "task0.safetensors")


def _success_frac(returns: list[float]) -> float:
    return float(np.mean(np.asarray(returns) >= SUCCESS_RETURN))


def summarise(run: dict[str, Any], steps_per_task: int) -> dict[str, Any]:
    """AUC per task (training returns), greedy final performance, forgetting, pool facts."""
    aucs = [
        auc(
            success_curve(
                t["curve"]["episode_returns"],
                t["curve"]["episode_steps"],
                SUCCESS_RETURN,
                BINS,
                steps_per_task,
            )
        )
        for t in run["tasks"]
    ]
    final = [_success_frac(t["eval_returns"]) for t in run["tasks"]]
    after_last = [_success_frac(r) for r in run["eval_after_last"]]
    return {
        "auc": aucs,
        "mean_auc": float(np.mean(aucs)),
        "final": final,
        "final_perf": float(np.mean(final)),
        "forgetting": forgetting(np.array(final), np.array(after_last)).tolist(),
        "pool_sizes": [t["pool_size"] for t in run["tasks"]],
        "pool_bytes": run["tasks"][-1]["pool_bytes"],
        "mixing_weights": [t["mixing_weights"] for t in run["tasks"]],
        "seconds": float(sum(t["curve"]["seconds"] for t in run["tasks"][1:])),
        "env_steps": int(sum(t["curve"]["env_steps"] for t in run["tasks"][1:])),
    }


def _pool(workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))


METHODS = [("scratch", 3), ("finetune", 3), ("cka_rl", 3), ("cka_rl", 2)]
#: steps per task of the full-mode sweep (issue #26), besides the main runs' 40k
STEPS_SWEEP = (10_000, 20_000)


def _train(
    cfg: CKARLReproConfig, seeds: list[int], methods: list[tuple[str, int]], workers: int
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every (method, pool size) on every seed, resumed from the seed's shared task-0 run;
    ``{(method, pool): [summary per seed]}``."""
    with tempfile.TemporaryDirectory() as tmp, _pool(workers) as ex:
        ckpts = list(ex.map(_task0, [(cfg, s, str(Path(tmp) / f"seed{s}")) for s in seeds]))
        jobs = [(cfg, m, s, p, c) for s, c in zip(seeds, ckpts, strict=True) for m, p in methods]
        runs = list(ex.map(_job, jobs))
    summ: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for (_, m, _, p, _), r in zip(jobs, runs, strict=True):
        summ.setdefault((m, p), []).append(summarise(r, cfg.steps_per_task))
    return summ


def _ft(summ: dict[tuple[str, int], list[dict[str, Any]]], key: tuple[str, int]) -> list[float]:
    """Mean FT over tasks 1..K-1 per seed, against from scratch on the same seed."""
    out = []
    for s_m, s_b in zip(summ[key], summ[("scratch", 3)], strict=True):
        n_tasks = len(s_b["auc"])
        vals = [forward_transfer(s_m["auc"][k], s_b["auc"][k]) for k in range(1, n_tasks)]
        out.append(float(np.nanmean(vals)))
    return out


def _gains(summ: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Per seed: FT and mean-AUC gains of CKA-RL (pool 3) over fine-tuning, and their parts."""
    cka, fine = ("cka_rl", 3), ("finetune", 3)
    ft_cka, ft_fine = _ft(summ, cka), _ft(summ, fine)
    return {
        "ft_gap": [a - b for a, b in zip(ft_cka, ft_fine, strict=True)],
        "auc_gap": [
            a["mean_auc"] - b["mean_auc"] for a, b in zip(summ[cka], summ[fine], strict=True)
        ],
        "ft_cka": ft_cka,
        "ft_finetune": ft_fine,
        "mean_auc": {
            m: [s["mean_auc"] for s in summ[(m, 3)]] for m in ("scratch", "finetune", "cka_rl")
        },
    }


def steps_sweep(
    seeds: list[int],
    budgets: tuple[int, ...] = STEPS_SWEEP,
    workers: int | None = None,
    cfg: CKARLReproConfig | None = None,
) -> dict[int, dict[str, Any]]:
    """From scratch, fine-tune and CKA-RL (pool 3) at each number of env steps per task in
    ``budgets`` (``cfg`` otherwise; default the full mode's), seeds ``seeds``: ``{steps:
    _gains}`` — per seed the FT gap, the mean-AUC gap and their parts."""
    cfg = cfg or CKARLReproConfig()
    workers = workers or min(2, os.cpu_count() or 1)
    out = {}
    for b in budgets:
        out[b] = _gains(_train(replace(cfg, steps_per_task=b), seeds, METHODS[:3], workers))
    return out


PAPER_TITLE = "Continual Knowledge Adaptation for Reinforcement Learning"
HEADLINE = (
    "CKA-RL (task-specific knowledge vectors mixed by learned weights, merged beyond a pool size) "
    "improves overall performance by 4.20 % and forward transfer by 8.02 % over the state of the "
    "art on Meta-World, Freeway and SpaceInvaders"
)
_PAPER = "+4.20 % overall performance, +8.02 % forward transfer over the state of the art (Meta-World, Freeway, SpaceInvaders)"
#: quick mode: one seed at 4k env steps per task (mechanism checks; paper claims full mode only)
QUICK_STEPS = 4_096
#: expected verdicts of the paper claims, set by the first full run (seeds 0-5): claim -> reason
_XFAIL: dict[str, str] = {
    "ft": "median +0.007 [-0.72, +1.14] over seeds 0-5 (3/6 seeds >= 0.1; seeds 0-2 negative, 3-5 "
    "positive): α hardly moves from its init and fine-tune's transfer swings with the seed",
    "auc": "median +0.013 [-0.26, +0.06] over seeds 0-5 (2/6 seeds >= 0.03): the sign is within "
    "seed noise at 40k steps per task",
    "final": "median 0.75 [0.55, 1.0] over seeds 0-5 (2/6 seeds >= 0.8): CKA-RL's T2 runs get stuck "
    "at a ~140-step CartPole plateau (cart off the track) on several seeds",
}


def run(mode: Mode = "quick", seed: int = 0, cfg: CKARLReproConfig | None = None) -> Result:
    cfg = cfg or (
        CKARLReproConfig() if mode == "full" else CKARLReproConfig(steps_per_task=QUICK_STEPS)
    )
    seeds = claim_seeds(mode, seed, quick=1, full=6)
    workers = cfg.workers or min(2, os.cpu_count() or 1)
    summ = _train(cfg, seeds, METHODS, workers)
    n_tasks = len(summ[("scratch", 3)][0]["auc"])

    def ft(key: tuple[str, int]) -> list[float]:
        return _ft(summ, key)

    def mean(key: tuple[str, int], field: str) -> float:
        return float(np.mean([s[field] for s in summ[key]]))

    head_params = 64 * 64 + 64 + 64 * 2 + 2  # fc1 + fc2 of the actor head
    labels = {
        ("scratch", 3): "from scratch",
        ("finetune", 3): "fine-tune",
        ("cka_rl", 3): "CKA-RL (pool 3)",
        ("cka_rl", 2): "CKA-RL (pool 2)",
    }
    result = Result(
        name="rl.cka_rl", mode=mode, seed=seed, paper_title=PAPER_TITLE, headline=HEADLINE
    )
    ft_vals = {k: float(np.mean(ft(k))) for k in labels}
    for key, label in labels.items():
        ss = summ[key]
        result.table.append(
            {
                "method": label,
                **{f"AUC T{k}": float(np.mean([s["auc"][k] for s in ss])) for k in range(n_tasks)},
                "mean AUC": mean(key, "mean_auc"),
                "final perf (greedy)": mean(key, "final_perf"),
                "FT vs scratch": ft_vals[key],
                "forgetting (mean)": float(np.mean([np.mean(s["forgetting"]) for s in ss])),
                "pool bytes": int(ss[0]["pool_bytes"]),
                "env steps/s": float(
                    np.sum([s["env_steps"] for s in ss]) / np.sum([s["seconds"] for s in ss])
                ),
            }
        )
    cka, fine, cka2 = ("cka_rl", 3), ("finetune", 3), ("cka_rl", 2)
    ft_cka, ft_fine = ft(cka), ft(fine)
    kw: dict[str, Any] = {"seeds": seeds, "modes": ("full",), "paper": _PAPER}
    xf = _XFAIL
    result.claims += [
        paper_claim(
            "FT(CKA-RL) - FT(fine-tune), forward transfer vs from scratch, mean over tasks 1-3",
            [a - b for a, b in zip(ft_cka, ft_fine, strict=True)],
            0.1,
            ">=",
            headline=True,
            expected="xfail" if "ft" in xf else "reproduces",
            reason=xf.get("ft", ""),
            **kw,
        ),
        paper_claim(
            "mean AUC(CKA-RL) - mean AUC(fine-tune), success AUC over the 4 tasks",
            [a["mean_auc"] - b["mean_auc"] for a, b in zip(summ[cka], summ[fine], strict=True)],
            0.03,
            ">=",
            headline=True,
            expected="xfail" if "auc" in xf else "reproduces",
            reason=xf.get("auc", ""),
            **kw,
        ),
        paper_claim(
            "CKA-RL final performance: greedy success (return >= 195 in 10 episodes) at the end of each task",
            [s["final_perf"] for s in summ[cka]],
            0.8,
            ">=",
            expected="xfail" if "final" in xf else "reproduces",
            reason=xf.get("final", ""),
            **kw,
        ),
        paper_claim(
            "CKA-RL pool_size=2: final performance (greedy success)",
            [s["final_perf"] for s in summ[cka2]],
            0.7,
            ">=",
            expected="xfail" if "final2" in xf else "reproduces",
            reason=xf.get("final2", ""),
            **kw,
        ),
        Claim(
            "CKA-RL pool_size=2: most vectors ever held in the pool",
            max(max(s["pool_sizes"]) for s in summ[cka2]),
            2,
            "<=",
            unit="vectors",
        ),
        Claim(
            "pool bytes after the last task / (pool_size x actor-head params x 4 B)",
            summ[cka][0]["pool_bytes"] / (3 * head_params * 4),
            1.0,
            "<=",
            unit="ratio",
        ),
        Claim(
            "pool sizes per task differ from [0, 1, 2, 3] capped at pool_size (count of tasks, both pools)",
            sum(s["pool_sizes"] != [0, 1, 2, 3] for s in summ[cka])
            + sum(s["pool_sizes"] != [0, 1, 2, 2] for s in summ[cka2]),
            0,
            "<=",
            unit="runs",
        ),
    ]
    result.metrics.update(
        {
            "seeds": seeds,
            "ft_per_seed": {labels[k]: ft(k) for k in (cka, fine, cka2)},
            "final_perf_per_seed": {
                labels[k]: [s["final_perf"] for s in summ[k]] for k in (cka, fine, cka2)
            },
            "mixing_weights_seed0": summ[cka][0]["mixing_weights"],
            "cka_vs_finetune_time_ratio": sum(s["seconds"] for s in summ[cka])
            / sum(s["seconds"] for s in summ[fine]),
        }
    )
    # one plot, every method side by side (separate plots of one line each compare nothing)
    result.add_series(
        f"success_seed{seed}",
        {"x": list(range(n_tasks))} | {label: summ[key][0]["auc"] for key, label in labels.items()},
        title=f"Success rate per task of the sequence, seed {seed}",
        xlabel="task in the sequence",
        ylabel="success rate (mean over training, AUC)",
        yscale="linear",
    )
    result.notes.append(
        f"{cfg.sequence}: {cfg.steps_per_task} env steps per task, PPO {cfg.n_envs} envs x {cfg.n_steps} steps, "
        f"{cfg.n_epochs} epochs x {cfg.n_minibatches} minibatches, lr {cfg.lr} and alpha-lr {cfg.alpha_lr} "
        f"{'annealed linearly to 0' if cfg.anneal_lr else 'constant (no annealing)'}; success = return >= {SUCCESS_RETURN}; seeds {seeds}; forgetting (our addition) is reported, no threshold; "
        f"fine-tune {'re-initialises' if cfg.finetune_reset_critic else 'carries over'} the critic at every task "
        "(official Finetune: load_critic=False); CKA-RL re-initialises it"
    )
    if mode == "full":
        _steps_section(result, cfg, seeds, workers, _gains(summ))
    return result


#: expected verdicts of the per-budget claims, set by the first full run (seeds 0-5; AMD EPYC
#: 2-core box, 2026-12-05 — the main 40k runs there equal the ledger's Intel Xeon run value for
#: value): (steps per task, "ft" | "auc") -> reason
_STEPS_XFAIL: dict[tuple[int, str], str] = {
    (10_000, "ft"): "median +0.064 [+0.00, +0.12] over seeds 0-5 (2/6 seeds >= 0.1; > 0 on 5/6, "
    "0 on seed 0): at 10k steps per task both transfers are negative against from scratch "
    "(mean AUC: scratch 0.19, CKA-RL 0.12, fine-tune 0.075, medians); CKA-RL loses less than "
    "fine-tune, by less than the threshold",
}


def _steps_section(
    result: Result,
    cfg: CKARLReproConfig,
    seeds: list[int],
    workers: int,
    main: dict[str, Any],
    sweep: tuple[int, ...] = STEPS_SWEEP,
) -> None:
    """The gains over fine-tuning against the number of env steps per task (issue #26): ``main``
    (:func:`_gains` of the main runs at ``cfg.steps_per_task``) and a rerun at every other budget
    in ``sweep``."""
    budgets = tuple(b for b in sweep if b != cfg.steps_per_task)
    t0 = time.perf_counter()
    gains = {**steps_sweep(seeds, budgets, workers, cfg), cfg.steps_per_task: main}
    cost = time.perf_counter() - t0
    xs = sorted(gains)

    def med(b: int, key: str) -> float:
        return float(np.median(gains[b][key]))

    result.add_series(
        "gains_vs_steps_per_task",
        {
            "x": [float(b) for b in xs],
            "FT(CKA-RL) - FT(fine-tune)": [med(b, "ft_gap") for b in xs],
            "mean AUC(CKA-RL) - mean AUC(fine-tune)": [med(b, "auc_gap") for b in xs],
        },
        title=f"CKA-RL's gains over fine-tuning vs env steps per task (median over seeds {seeds})",
        xlabel="env steps per task",
        ylabel="gain over fine-tuning (FT; AUC fraction)",
        yscale="linear",
    )
    kw: dict[str, Any] = {"seeds": seeds, "modes": ("full",), "paper": _PAPER}
    for b in budgets:
        for key, text, thr in (
            ("ft", "FT(CKA-RL) - FT(fine-tune), forward transfer vs from scratch, mean over tasks 1-3", 0.1),
            ("auc", "mean AUC(CKA-RL) - mean AUC(fine-tune), success AUC over the 4 tasks", 0.03),
        ):  # fmt: skip
            reason = _STEPS_XFAIL.get((b, key), "")
            result.claims.append(
                paper_claim(
                    f"{b:,} steps per task: {text}",
                    gains[b][f"{key}_gap"],
                    thr,
                    ">=",
                    expected="xfail" if reason else "reproduces",
                    reason=reason,
                    **kw,
                )
            )
    result.metrics["steps_sweep"] = {str(b): gains[b] for b in xs}
    result.metrics["steps_sweep_s"] = cost
    result.notes.append(
        "Gains over fine-tuning against env steps per task (issue #26; from scratch, fine-tune and "
        f"CKA-RL pool 3 rerun at {', '.join(f'{b // 1000}k' for b in budgets)} on seeds {seeds}; "
        f"{cost / 60:.1f} min): median [min, max] FT gap / AUC gap per budget: "
        + "; ".join(
            f"{b // 1000}k {med(b, 'ft_gap'):+.3f} [{min(gains[b]['ft_gap']):+.2f}, "
            f"{max(gains[b]['ft_gap']):+.2f}] / {med(b, 'auc_gap'):+.3f} "
            f"[{min(gains[b]['auc_gap']):+.2f}, {max(gains[b]['auc_gap']):+.2f}]"
            for b in xs
        )
        + ". The gains are reported per budget, not at one budget: their sign changes with it."
    )

"""S'MoRE's data generator: the default is the original two-level task bit for bit; deeper
hierarchies; the reproduction's experiment(task=...)."""

import pytest
import torch

from eff_llm.smore import HierarchicalRegression, hierarchical_regression


def _two_level_reference(dim, groups, noise, delta_scale, seed, centre_scale, delta_norm):
    """The original private two-level generator (eff_llm._data.clustered_regression before
    hierarchical_regression replaced it), verbatim: centres, W0, deltas and its sampler."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    def low_rank(rank, *lead):
        u, v = randn(*lead, dim, rank), randn(*lead, dim, rank)
        norm = (rank * dim) ** 0.5 if delta_norm == "frobenius" else dim
        return delta_scale * (u @ v.transpose(-1, -2)) / norm

    cg, cj = centre_scale * randn(groups, dim), centre_scale * randn(groups, dim)
    w0 = randn(dim, dim) / dim**0.5
    dg, dj, dgj = low_rank(2, groups), low_rank(2, groups), low_rank(1, groups, groups)

    def sample(n, generator):
        g = torch.randint(0, groups, (n,), generator=generator)
        j = torch.randint(0, groups, (n,), generator=generator)
        eps = torch.randn(n, dim, generator=generator)
        x = cg[g] + cj[j] + noise * eps
        w = w0 + dg[g] + dj[j] + dgj[g, j]
        return x, torch.einsum("nod,nd->no", w, x)

    return (cg, cj, w0, dg, dj, dgj), sample


@pytest.mark.parametrize(
    ("kw", "ref"),
    [
        ({}, (32, 4, 0.5, 1.0, 0, 1.0, "frobenius")),
        (  # the reproduction's calibrated teacher
            {"centre_scale": 2.0, "delta_norm": "per_direction", "delta_scale": 0.5, "seed": 3},
            (32, 4, 0.5, 0.5, 3, 2.0, "per_direction"),
        ),
        ({"dim": 16, "groups": 3, "noise": 0.1, "seed": 5}, (16, 3, 0.1, 1.0, 5, 1.0, "frobenius")),
    ],
)
def test_the_default_two_level_task_is_bit_identical_to_the_original(kw, ref):
    task = hierarchical_regression(**kw)
    tensors, sample = _two_level_reference(*ref)
    got = (*task.centres, task.w0, *task.level_deltas, *task.path_deltas)
    assert task.levels == 2 and len(got) == len(tensors) == 6
    assert all(torch.equal(a, b) for a, b in zip(got, tensors, strict=True))
    for n, s in ((7, 0), (512, 11)):
        x, y = task.sample(n, torch.Generator().manual_seed(s))
        xr, yr = sample(n, torch.Generator().manual_seed(s))
        assert torch.equal(x, xr) and torch.equal(y, yr)


def test_three_levels_every_level_and_path_shapes_the_teacher():
    task = hierarchical_regression(levels=3, groups=(2, 3, 4), dim=8, seed=1, level_rank=3)
    assert isinstance(task, HierarchicalRegression) and task.groups == (2, 3, 4)
    assert [tuple(c.shape) for c in task.centres] == [(2, 8), (3, 8), (4, 8)]
    assert [tuple(d.shape) for d in task.level_deltas] == [(2, 8, 8), (3, 8, 8), (4, 8, 8)]
    assert [tuple(d.shape) for d in task.path_deltas] == [(2, 3, 8, 8), (2, 3, 4, 8, 8)]
    assert all(
        int(torch.linalg.matrix_rank(d.reshape(-1, 8, 8)[0])) == 3 for d in task.level_deltas
    )
    assert all(
        int(torch.linalg.matrix_rank(d.reshape(-1, 8, 8)[-1])) == 1 for d in task.path_deltas
    )
    x, y, z = task.sample(64, torch.Generator().manual_seed(0), return_clusters=True)
    assert z.shape == (64, 3) and all(
        set(z[:, i].tolist()) == set(range(g)) for i, g in enumerate((2, 3, 4))
    )
    for t in range(
        64
    ):  # y = (W0 + Σ level deltas + path deltas (z0 z1), (z0 z1 z2)) x, written out
        a, b, c = z[t].tolist()
        w = task.w0 + task.level_deltas[0][a] + task.level_deltas[1][b] + task.level_deltas[2][c]
        w = w + task.path_deltas[0][a, b] + task.path_deltas[1][a, b, c]
        torch.testing.assert_close(y[t], w @ x[t], atol=1e-5, rtol=0)
    centre = task.centres[0][z[:, 0]] + task.centres[1][z[:, 1]] + task.centres[2][z[:, 2]]
    assert (x - centre).std().item() == pytest.approx(0.5, rel=0.15)
    # the third level matters: the same x under another leaf cluster has another target
    z2 = z.clone()
    z2[:, 2] = (z2[:, 2] + 1) % 4
    y2 = torch.einsum("nod,nd->no", task.weight(z2), x)
    assert (y2 - y).abs().min(dim=1).values.max() > 1e-3


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"levels": 0}, ValueError, "levels"),
        ({"levels": 3, "groups": (4, 4)}, ValueError, "one count per level"),
        ({"groups": (4, 0)}, ValueError, "groups"),
        ({"groups": True}, TypeError, "groups"),
        ({"level_rank": 40}, ValueError, "level_rank must be <= dim"),
        ({"path_rank": 0}, ValueError, "path_rank"),
        ({"delta_norm": "spectral"}, ValueError, "delta_norm"),
    ],
)
def test_hierarchical_regression_bad_input(kw, exc, match):
    with pytest.raises(exc, match=match):
        hierarchical_regression(**kw)


@pytest.mark.slow
def test_experiment_runs_on_a_three_level_task():
    from eff_llm.reproduce.smore import SMoREReproConfig, experiment

    cfg = SMoREReproConfig(
        steps=150,
        num_experts=(4, 4, 4),
        num_active=(2, 2, 2),
        expert_ranks=(2, 2, 2),
        train_size=4096,
        test_size=1024,
    )

    def build(seed):
        return hierarchical_regression(
            levels=3, seed=seed, centre_scale=2.0, delta_norm="per_direction", delta_scale=0.5
        )

    out = experiment(cfg, 1, task=build)
    task = out["task"]
    assert task.levels == 3 and torch.equal(task.w0, build(1).w0)
    # the least-squares row is that task's own floor (same test / fit draws as experiment's)
    x_t, y_t = task.sample(cfg.test_size, torch.Generator().manual_seed(1 + 10_000))
    x_f, y_f = task.sample(cfg.test_size, torch.Generator().manual_seed(1 + 20_000))
    base = torch.nn.functional.mse_loss(x_t @ task.w0.t(), y_t)
    w = torch.linalg.lstsq(x_f, y_f).solution.t()
    floor = float(torch.nn.functional.mse_loss(x_t @ w.t(), y_t) / base)
    assert out["linear_floor"] == pytest.approx(floor, rel=1e-6)
    assert out["count"] == out["budget"]  # the 3-sub-layer S'MoRE has the formula's count
    # the routed students fit part of the hierarchy that no input-independent update can (at init
    # S'MoRE is the base, rel-MSE 1)
    assert out["smore"] < min(out["lora"], out["linear_floor"])
    assert out["molora"] < min(out["lora"], out["linear_floor"])
    # a fixed task object works the same as its builder
    same = experiment(cfg, 1, task=build(1))
    assert same["smore"] == out["smore"] and same["lora"] == out["lora"]


def test_experiment_rejects_a_task_that_does_not_fit():
    from eff_llm.reproduce.smore import SMoREReproConfig, experiment, resolve_task

    cfg = SMoREReproConfig()
    assert torch.equal(
        resolve_task(None, cfg, 2).w0,
        hierarchical_regression(
            seed=2, centre_scale=2.0, delta_norm="per_direction", delta_scale=0.5
        ).w0,
    )
    with pytest.raises(ValueError, match=r"task.w0 must be \(dim, dim\) = \(32, 32\)"):
        experiment(cfg, 0, task=hierarchical_regression(levels=3, dim=16))
    with pytest.raises(TypeError, match="task must be None, a HierarchicalRegression"):
        experiment(cfg, 0, task=torch.zeros(32, 32))
    with pytest.raises(TypeError, match="task must be None, a HierarchicalRegression"):
        experiment(cfg, 0, task=lambda seed: "not a task")

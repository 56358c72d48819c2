"""The compiled Pan-LUT inference paths (issue #25) against their references.

``impl="fused"`` must compute what ``impl="gather"`` computes: the kernels repeat the reference's
float32 operations in the same order, so the tolerance is 1e-6 (observed: 0). The baked fused path
must equal the baked torch path exactly: both are nearest lookups on the same uint8 tables, and an
SDLUT output one ulp off could round to another code.
"""

import numpy as np
import pytest
import torch

from eff_vision.data.images import sample_image
from eff_vision.data.pansharpen import wald_degrade
from eff_vision.metrics import pansharpen as M
from eff_vision.panlut import SDLUT, PanLUT, lut_transform
from eff_vision.panlut.training import PanTrainConfig, train_pansharpener
from eff_vision.reproduce.panlut import make_panlut

TOL = 1e-6


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _perturbed(model, seed=0, scale=0.1):
    g = _gen(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g)).clamp_(0, 1)
    return model


def _inputs(seed, bands, h, w, ratio=4):
    rng = np.random.default_rng(seed)
    return (
        rng.random((h, w, bands)).astype(np.float32),
        rng.random((ratio * h, ratio * w)).astype(np.float32),
    )


@torch.no_grad()
def _predict(model, ms, pan):
    return model(torch.from_numpy(ms).permute(2, 0, 1)[None], torch.from_numpy(pan)[None, None])


def _max_err(a, b):
    return float((a - b).abs().max())


# ------------------------------------------------------------------------------ the primitive


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_fused_lookup_equals_gather(n):
    g = _gen(n)
    for d, c in ((2, 1), (3, 4), (5, 3), (9, 6)):
        lut = torch.randn(c, *([d] * n), generator=g)
        # width 300 > one 256-pixel block; grid points and the cube's corners included
        x = torch.rand(2, n, 3, 300, generator=g)
        x[0, :, 0, :d] = torch.linspace(0, 1, d)
        x[1, :, 2, 0], x[1, :, 2, 1] = 0.0, 1.0
        ref = lut_transform(x, lut, impl="gather")
        out = lut_transform(x, lut, impl="fused")
        assert out.shape == ref.shape and out.dtype == torch.float32
        assert _max_err(out, ref) <= TOL, (d, c)
        # the comparison can fail: another table gives another answer
        assert _max_err(lut_transform(x, lut + 0.01, impl="fused"), ref) > 1e-3


@pytest.mark.parametrize("mode", ["chain", "mean"])
@pytest.mark.parametrize("rotations", [(0, 90, 180, 270), (180,), (90, 0, 270)])
def test_fused_sdlut_equals_reference(mode, rotations):
    g = _gen(7)
    sd = SDLUT(3, 5, rotations=rotations, mode=mode)
    with torch.no_grad():
        sd.luts.add_(0.2 * torch.randn(sd.luts.shape, generator=g))
    for shape in ((2, 3, 9, 8), (1, 3, 1, 1), (1, 3, 1, 5), (1, 3, 6, 1), (1, 3, 4, 261)):
        x = torch.rand(*shape, generator=g)
        with torch.no_grad():
            ref = sd(x)
            sd.impl = "fused"
            out = sd(x)
            sd.impl = "gather"
        assert _max_err(out, ref) <= TOL, shape


# ------------------------------------------------------------------------------ the network


@pytest.mark.parametrize(
    ("bands", "kwargs"),
    [(1, {"pg_out_channels": 2}), (3, {"pg_out_channels": 4}), (4, {"pg_dim": 5, "sd_mode": "mean"}),
     (3, {"pg_out_channels": 5, "ao_dim": 3}), (2, {"pg_out_channels": 2})],
)  # fmt: skip
def test_fused_panlut_equals_gather(bands, kwargs):
    make = lambda: PanLUT(bands, **{"pg_dim": 3, "sd_dim": 5, "ao_dim": 5, **kwargs})  # noqa: E731
    model = _perturbed(make(), bands)
    ms, pan = _inputs(bands, bands, 7, 9)
    ref = _predict(model, ms, pan)
    model.impl = "fused"
    assert model.pg.impl == model.sd.impl == model.ao.impl == "fused"
    out = _predict(model, ms, pan)
    assert _max_err(out, ref) <= TOL
    assert _max_err(out, _predict(make(), ms, pan)) > 1e-3  # vs the untrained (identity) tables


@pytest.mark.parametrize("consistency", [False, True])
def test_fused_tiled_equals_whole_and_gather(consistency):
    model = _perturbed(make_panlut(consistency=consistency), 3)
    ms, pan = _inputs(5, 3, 23, 19)
    whole_ref = _predict(model, ms, pan)[0].permute(1, 2, 0).numpy()
    model.impl = "fused"
    whole = _predict(model, ms, pan)[0].permute(1, 2, 0).numpy()
    assert np.abs(whole - whole_ref).max() <= TOL
    for tile in (41, 60) if consistency else (5, 24, 50):
        tiled = model.predict_tiled(ms, pan, tile=tile)
        assert np.abs(tiled - whole).max() <= TOL, tile
    assert model.impl == "fused"


def test_fused_on_a_trained_model_gives_the_same_image_and_psnr():
    """A briefly trained reproduction model (tables far from the identity), applied to a held-out
    Wald-degraded scene: the same image, hence the same PSNR."""
    model = make_panlut()
    train = [sample_image("astronaut", max_side=128)]
    train_pansharpener(model, train, PanTrainConfig(steps=15, patch=32, lr=2e-2, seed=0))
    assert model.impl == "gather"
    gt = sample_image("coffee", multiple_of=32, max_side=256)
    ms, pan = wald_degrade(gt, 4, seed=1)
    ref = _predict(model, ms, pan)
    model.impl = "fused"
    out = _predict(model, ms, pan)
    assert _max_err(out, ref) <= TOL
    to_np = lambda t: t[0].permute(1, 2, 0).numpy().astype(np.float64)  # noqa: E731
    assert M.psnr(gt, to_np(out)) == pytest.approx(M.psnr(gt, to_np(ref)), abs=1e-6)
    assert _max_err(ref, _predict(make_panlut(), ms, pan)) > 1e-2  # training moved the tables


def test_fused_follows_table_updates_and_training_keeps_torch_paths():
    model = PanLUT(3, pg_dim=3, sd_dim=3, ao_dim=3, pg_out_channels=4)
    model.impl = "fused"
    ms, pan = _inputs(2, 3, 6, 5)
    before = _predict(model, ms, pan)  # fills the kernels' table caches
    imgs = [np.random.default_rng(3).random((64, 64, 3)).astype(np.float32)]
    train_pansharpener(model, imgs, PanTrainConfig(steps=3, patch=16, seed=2))  # trains on "grid"
    assert model.impl == "fused"
    after = _predict(model, ms, pan)
    model.impl = "gather"
    assert _max_err(after, _predict(model, ms, pan)) <= TOL
    assert _max_err(after, before) > 1e-4
    model.sd.luts = torch.nn.Parameter(torch.rand(model.sd.luts.shape))  # a new tensor
    ref = _predict(model, ms, pan)
    model.impl = "fused"
    assert _max_err(_predict(model, ms, pan), ref) <= TOL


# ------------------------------------------------------------------------------ the baked path


@pytest.mark.parametrize("consistency", [False, True])
def test_baked_fused_equals_baked_reference(consistency):
    model = _perturbed(make_panlut(consistency=consistency), 11)
    ref, fast = model.bake(), model.bake(impl="fused")
    assert ref.impl == "gather" and fast.impl == "fused"
    ms, pan = _inputs(4, 3, 17, 23)
    # rounding ties of the nearest lookups: x·(d−1) = k + 1/2 (d = 17), and the grid ends
    ms[0, :5, 0] = np.array([0.5, 1.5, 2.5, 0.0, 16.0]) / 16
    pan[0, :5] = np.array([0.5, 7.5, 15.5, 1.0, 0.0]) / 16
    assert torch.equal(_predict(fast, ms, pan), _predict(ref, ms, pan))
    tile = 41 if consistency else 24
    assert np.array_equal(
        fast.predict_tiled(ms, pan, tile=tile), ref.predict_tiled(ms, pan, tile=tile)
    )
    x = torch.rand(1, 4, 5, 6, generator=_gen(1))
    x[0, :, 0, 0] = torch.tensor([0.5, 1.5, 2.5, 15.5]) / 16
    assert torch.equal(fast._nearest_fused(x, fast.pg_q), ref._nearest(x, ref.pg_q))


# ------------------------------------------------------------------------------ bad input


def test_fused_rejects_what_it_cannot_compute():
    lut = torch.rand(2, 3, 3, 3)
    x = torch.rand(1, 3, 4, 4)
    with pytest.raises(ValueError, match="float32"):
        lut_transform(x.double(), lut.double(), impl="fused")
    with pytest.raises(ValueError, match="autograd"):
        lut_transform(x, lut.requires_grad_(), impl="fused")
    with torch.no_grad():  # without autograd the same call is fine
        assert lut_transform(x, lut, impl="fused").shape == (1, 2, 4, 4)
    with pytest.raises(ValueError, match="impl must be one of"):
        lut_transform(x, lut, impl="numba")
    model = PanLUT(3, pg_dim=3, sd_dim=3, ao_dim=3)
    with pytest.raises(ValueError, match="impl must be one of"):
        model.impl = "fast"
    with pytest.raises(ValueError, match="impl must be one of"):
        model.bake(impl="grid")
    model.impl = "fused"
    ms, pan = torch.rand(1, 3, 4, 4), torch.rand(1, 1, 16, 16)
    with pytest.raises(ValueError, match="autograd"):
        model(ms, pan)  # parameters require grad: train with "gather" / "grid"
    with torch.no_grad(), pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        model.sd(torch.rand(1, 2, 4, 4))
    with torch.no_grad(), pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        model(ms * 2, pan)


def test_fused_kernels_stay_in_bounds_on_non_finite_input():
    """Module calls skip PanLUT's input checks: a NaN or inf must not index outside a table (the
    pixel's output is then undefined, the others are unaffected)."""
    model = _perturbed(PanLUT(3, pg_dim=3, sd_dim=3, ao_dim=3, pg_out_channels=4), 5)
    x = torch.rand(1, 4, 5, 5, generator=_gen(2))
    bad = torch.zeros(5, 5, dtype=torch.bool)
    for k, v in enumerate((float("nan"), float("inf"), -float("inf"))):
        x[0, :, k + 1, k + 1], bad[k + 1, k + 1] = v, True
    with torch.no_grad():
        ref = model.pg(torch.nan_to_num(x, nan=0.5, posinf=1.0, neginf=0.0))
        model.impl = "fused"
        out = model.pg(x)
        assert model.ao(model.sd(out.clamp(0, 1))).shape == (1, 3, 5, 5)
        baked = model.bake(impl="fused")
        assert torch.isfinite(baked._nearest_fused(x, baked.pg_q)).all()
    assert _max_err(out[..., ~bad], ref[..., ~bad]) <= TOL

import math

import pytest
import torch
import torch.nn.functional as F

from eff_vision.fingerprint import (
    PADDING_MODES,
    FingerprintModule,
    FingerprintRecord,
    UchidaWatermark,
    embed,
    extract,
    invariant_basis,
    invariant_coords,
    revised_fourier,
    verify,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("size", [(8, 8), (9, 12)])
def test_revised_fourier_matches_fft2_of_the_zero_padded_filter(size):
    w = torch.randn(2, 3, 5, 5, generator=_gen(), dtype=torch.float64)
    padded = F.pad(w, (0, size[1] - 5, 0, size[0] - 5))
    ref = torch.conj(torch.fft.fft2(padded))  # e^{+i…} convention
    assert torch.allclose(revised_fourier(w, size), ref, atol=1e-12)


def test_circular_conv_is_a_product_with_the_revised_transform():
    g = _gen(1)
    w = torch.randn(1, 1, 5, 5, generator=g, dtype=torch.float64)
    x = torch.randn(1, 1, 8, 8, generator=g, dtype=torch.float64)
    y = F.conv2d(F.pad(x, (2, 2, 2, 2), mode="circular"), w)
    u = torch.arange(8, dtype=torch.float64)
    phase = torch.exp(-2j * math.pi * (u[:, None] * 2 / 8 + u[None, :] * 2 / 8))
    pred = phase * revised_fourier(w, (8, 8))[0, 0] * torch.fft.fft2(x[0, 0])
    assert torch.allclose(torch.fft.fft2(y[0, 0]), pred, atol=1e-10)


def test_invariant_basis_dimensions_and_orthogonality():
    b = invariant_basis(5, (8, 8), 1)
    assert b.shape == (25, 16)
    assert torch.allclose(b.T @ b, torch.eye(16, dtype=torch.float64), atol=1e-12)
    # every basis filter has zero revised transform on the low band
    f = revised_fourier(b.T.reshape(16, 5, 5), (8, 8))
    band = [(u % 8, v % 8) for u in (-1, 0, 1) for v in (-1, 0, 1)]
    assert max(float(f[:, u, v].abs().max()) for u, v in band) < 1e-12
    assert invariant_basis(3, (8, 8), 1).shape == (9, 0)
    assert invariant_basis(5, (8, 8), 0).shape == (25, 24)


def test_embedding_does_not_change_the_function():
    mod = FingerprintModule(4).double()
    x = torch.randn(3, 4, 8, 8, generator=_gen(2), dtype=torch.float64)
    before = mod(x)
    embed(mod, torch.randint(0, 2, (40,), generator=_gen(3)), key=5)
    assert torch.allclose(mod(x), before, atol=1e-12)


def _sgd_steps(mod, opt, steps, seed):
    g = _gen(seed)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(4, mod.channels, 8, 8, generator=g, dtype=torch.float64)
        (
            mod(x) * torch.randn(4, mod.channels, 8, 8, generator=g, dtype=torch.float64)
        ).sum().backward()
        opt.step()


def test_sgd_leaves_invariant_coordinates_unchanged_but_adam_does_not():
    mod = FingerprintModule(4).double()
    z0 = invariant_coords(mod)
    _sgd_steps(mod, torch.optim.SGD(mod.parameters(), lr=0.01, momentum=0.9), 5, 4)
    assert float((invariant_coords(mod) - z0).norm() / z0.norm()) < 1e-12
    mod2 = FingerprintModule(4).double()
    z0 = invariant_coords(mod2)
    _sgd_steps(mod2, torch.optim.Adam(mod2.parameters(), lr=0.01), 5, 4)
    assert float((invariant_coords(mod2) - z0).norm() / z0.norm()) > 1e-3


def test_weight_decay_only_rescales_the_invariant_coordinates():
    mod = FingerprintModule(4).double()
    z0 = invariant_coords(mod)
    _sgd_steps(
        mod, torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01), 5, 5
    )
    z = invariant_coords(mod)
    alpha = float((z * z0).sum() / (z0 * z0).sum())
    assert float((z - z0).norm() / z0.norm()) > 1e-3
    assert float((z - alpha * z0).norm() / z0.norm()) < 1e-12
    assert alpha < 1


def test_permutation_and_scale_are_recovered():
    mod = FingerprintModule(8)
    bits = torch.randint(0, 2, (200,), generator=_gen(6))
    record = embed(mod, bits, key=11)
    perm = torch.randperm(8, generator=_gen(7))
    with torch.no_grad():
        mod.conv.weight.copy_(mod.conv.weight[perm][:, perm] * 3.7)
    res = verify(mod, record)
    assert torch.equal(res.permutation, perm)
    assert res.ber == 0.0 and res.passed
    assert res.scale == pytest.approx(3.7, rel=1e-5)
    assert verify(mod, record, align=False).ber > 0.3


def test_embed_extract_round_trip_and_keys():
    m1, m2, m3 = FingerprintModule(6), FingerprintModule(6), FingerprintModule(6)
    bits01 = torch.randint(0, 2, (100,), generator=_gen(8))
    r1 = embed(m1, bits01, key=3)
    r2 = embed(m2, bits01 * 2 - 1, key=3)
    r3 = embed(m3, bits01, key=4)
    assert torch.equal(extract(m1, r1), bits01.to(torch.float64) * 2 - 1)
    assert torch.equal(r1.slots, r2.slots) and not torch.equal(r1.slots, r3.slots)
    assert len(set(r1.slots.tolist())) == 100


def test_lora_fine_tuning_leaves_the_gradient_span():
    """Documented limit: a LoRA-style update B·A is not confined to S_𝓛."""
    from eff_vision.models import LoRAConv

    mod = FingerprintModule(4).double()
    z0 = invariant_coords(mod)
    lora = LoRAConv(mod.conv, 2, seed=0).double()
    mod.conv = lora
    opt = torch.optim.SGD([lora.a, lora.b], lr=0.05)
    _sgd_steps(mod, opt, 3, 9)
    mod.conv = lora.base
    with torch.no_grad():
        mod.conv.weight.copy_(lora.merged())
    assert float((invariant_coords(mod) - z0).norm() / z0.norm()) > 1e-4


def test_uchida_watermark_embeds_with_its_regulariser():
    from torch import nn

    net = nn.Sequential(nn.Conv2d(3, 8, 3))
    wm = UchidaWatermark("0", 32, key=1, weight=1.0)
    assert wm.ber(net) > 0.1
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(200):
        opt.zero_grad()
        wm.regularizer(net).backward()
        opt.step()
    assert wm.ber(net) == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="dim S\\^⊥ = 0"):
        FingerprintModule(4, kernel_size=3, band=1)
    mod = FingerprintModule(4)
    with pytest.raises(ValueError, match="feature size"):
        mod(torch.zeros(1, 4, 16, 16))
    record = embed(mod, torch.ones(10), key=1)
    mod.conv.padding_mode = "zeros"
    with pytest.raises(ValueError, match="circular"):
        mod(torch.zeros(1, 4, 8, 8))
    with pytest.raises(ValueError, match="circular"):
        embed(mod, torch.ones(10), key=1)
    with pytest.raises(ValueError, match="circular"):
        verify(mod, record)
    mod.conv.padding_mode = "circular"
    with pytest.raises(ValueError, match="exceed the module's capacity"):
        embed(mod, torch.ones(4 * 4 * 16 + 1), key=1)
    with pytest.raises(ValueError, match="bits must take values"):
        embed(mod, torch.tensor([0, 1, 2]), key=1)
    with pytest.raises(ValueError, match="bits must take values"):
        embed(mod, torch.tensor([0.5, 1.0]), key=1)
    with pytest.raises(ValueError, match="record does not match"):
        verify(FingerprintModule(6), record)
    bad = FingerprintRecord(**{**record.__dict__, "band": 2})
    with pytest.raises(ValueError, match="record does not match"):
        extract(mod, bad)
    with pytest.raises(ValueError, match="feature_size"):
        invariant_basis(5, (4, 4), 1)


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_padding_mode_is_the_convs_and_only_circular_keeps_sgd_invariance(mode):
    mod = FingerprintModule(4, padding_mode=mode).double()
    assert mod.conv.padding_mode == mode and mod.padding_mode == mode
    x = torch.randn(2, 4, 8, 8, generator=_gen(6), dtype=torch.float64)
    pad = {"zeros": "constant"}.get(mode, mode)
    ref = x + F.conv2d(F.pad(mod.low_pass(x), (2, 2, 2, 2), mode=pad), mod.conv.weight)
    assert torch.allclose(mod(x), ref, atol=1e-12)
    bits = torch.randint(0, 2, (40,), generator=_gen(7))
    record = embed(mod, bits, key=3)
    assert verify(mod, record).ber == 0.0
    z0 = invariant_coords(mod)
    _sgd_steps(mod, torch.optim.SGD(mod.parameters(), lr=0.01, momentum=0.9), 5, 4)
    change = float((invariant_coords(mod) - z0).norm() / z0.norm())
    if mode == "circular":
        assert change < 1e-12
    else:  # border patches of band-limited inputs span every 5×5 filter: no exact invariance
        assert change > 1e-3


def test_padding_changed_on_the_conv_after_construction_raises():
    mod = FingerprintModule(4, padding_mode="zeros")
    embed(mod, torch.ones(8), key=1)
    mod.conv.padding_mode = "circular"
    with pytest.raises(ValueError, match="built with padding_mode='zeros'"):
        mod(torch.zeros(1, 4, 8, 8))
    with pytest.raises(ValueError, match="padding_mode"):
        FingerprintModule(4, padding_mode="same")


def _erase_fingerprint(net, data, seed):
    """An attacker who knows the construction: zero every invariant coordinate (W − B Bᵀ W)."""
    with torch.no_grad():
        w = net.fp.conv.weight
        o, i = w.shape[:2]
        basis = net.fp.basis.to(torch.float64)
        flat = w.detach().to(torch.float64).reshape(o, i, -1)
        z = torch.einsum("oik,kd->oid", flat, basis)
        w.copy_((flat - torch.einsum("oid,kd->oik", z, basis)).reshape(w.shape).to(w.dtype))
    return net


def test_experiment_takes_the_kernel_size_padding_and_a_user_attack():
    from eff_vision.reproduce.fingerprint import FingerprintReproConfig, experiment

    small = {"n_owner": 128, "n_attacker": 64, "n_test": 64, "owner_epochs": 2, "attack_epochs": 2}
    cfg = FingerprintReproConfig(**small, kernel_size=7, attacks=("sgd", _erase_fingerprint))
    out = experiment(cfg, 1)
    rec = out["record"]
    assert rec.kernel_size == 7 and rec.reference.shape == (16, 16, 40)  # 49 − 9 invariant dims
    sgd, erase = out["attacks"]["sgd"], out["attacks"]["_erase_fingerprint"]
    assert sgd["ber"] == 0.0 and sgd["change"] < 1e-4  # the guarantee holds at K = 7
    # only float32 rounding is left of the coordinates: their signs are at chance
    assert erase["ber"] > 0.3 and erase["change"] == pytest.approx(1.0, abs=1e-4)
    # the erased part lives in the layer's null space for band-limited inputs: same function
    assert erase["ber_naive"] == out["owner"]["ber_naive"]
    zeros = experiment(FingerprintReproConfig(**small, padding_mode="zeros", attacks=("sgd",)), 1)
    assert (
        zeros["owner"]["change"] > 1e-4
    )  # zero padding voids the exact invariance (circular: ~1e-6)
    assert zeros["attacks"]["sgd"]["change"] > 1e-4


def test_experiment_config_rejects_bad_attacks_and_padding():
    from eff_vision.reproduce.fingerprint import FingerprintReproConfig, experiment

    with pytest.raises(ValueError, match="attacks must be among"):
        FingerprintReproConfig(attacks=("bogus",))

    def sgd(net, data, seed):
        return net

    with pytest.raises(ValueError, match="attacks must have distinct names"):
        FingerprintReproConfig(attacks=(sgd,))
    with pytest.raises(ValueError, match="padding_mode"):
        FingerprintReproConfig(padding_mode="same")
    cfg = FingerprintReproConfig(
        n_owner=64, n_attacker=32, n_test=32, owner_epochs=1, attacks=(lambda n, d, s: n.c2,)
    )
    with pytest.raises(TypeError, match=r"must return a model with a \.fp FingerprintModule"):
        experiment(cfg, 0)


def test_same_seed_same_fingerprint_experiment():
    from eff_vision.reproduce.fingerprint import FingerprintReproConfig, experiment

    cfg = FingerprintReproConfig(
        n_owner=128, n_attacker=64, n_test=64, owner_epochs=1, attack_epochs=1, attacks=("sgd",)
    )
    a, b = experiment(cfg, 3), experiment(cfg, 3)
    assert a["owner"]["acc"] == b["owner"]["acc"]
    assert a["attacks"]["sgd"]["change"] == b["attacks"]["sgd"]["change"]
    assert torch.equal(a["record"].reference, b["record"].reference)


@pytest.mark.slow
def test_quick_reproduction_claims_hold():
    from eff_vision.reproduce import fingerprint

    result = fingerprint.run("quick", seed=0)
    assert result.error is None and result.passed
    failed = [(c.text, c.measured, c.threshold) for c in result.claims if not c.passed]
    assert not failed, failed
    assert all(c.verdict("quick") == "pass" for c in result.claims)
    assert len(result.claims) == 17
    paper = [c for c in result.claims if c.kind == "paper"]
    assert len(paper) == 2 and paper[0].headline and "naive" in paper[0].text


def test_cli_fingerprint_kernel_size_and_padding_options(tmp_path):
    import json

    from typer.testing import CliRunner

    from eff_vision.cli import app

    runner = CliRunner()
    path = tmp_path / "fp.json"
    args = ["fingerprint", "--attack", "sgd", "--owner-epochs", "1", "--attack-epochs", "1"]
    res = runner.invoke(app, [*args, "--kernel-size", "7", "--json", str(path)])
    assert res.exit_code == 0, res.output
    rows = json.loads(path.read_text())["rows"]
    assert rows[1]["BER fingerprint"] == 0.0 and rows[1]["rel. change"] < 1e-4
    res = runner.invoke(app, [*args, "--padding-mode", "zeros", "--json", str(path)])
    assert res.exit_code == 0, res.output
    rows = json.loads(path.read_text())["rows"]
    assert rows[1]["rel. change"] > 1e-4  # zero padding: the invariance is only approximate
    assert runner.invoke(app, [*args, "--padding-mode", "same"]).exit_code == 2
    assert runner.invoke(app, [*args, "--kernel-size", "4"]).exit_code == 2
    assert runner.invoke(app, [*args, "--kernel-size", "3"]).exit_code == 2  # no invariant dim

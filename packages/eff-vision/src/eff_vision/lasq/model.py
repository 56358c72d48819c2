"""LASQ part 2: the learned student of the prior (official ``models/decom.py``, ``models/unet.py``,
``models/Gamma_Diff.py``; built from config, trained from scratch; CPU smoke scale only).

- **CTDN** (stage 1): a feature autoencoder — a pyramid encoder to 1/8 resolution squeezed to a
  3-channel sigmoid latent, and a decoder that lifts a latent back with skip features of the
  low-light input (the official ``ReconNet``; its unused ``Retinex_decom`` branch is omitted).
- **DiffusionUNet** (stage 2): a DDPM UNet (sinusoidal time embedding, residual blocks with
  GroupNorm and swish, self-attention in the middle) on the latent, conditioned on the low-light
  latent by channel concatenation; linear β schedule, DDIM sampling (η = 0).
- **Transition paths** (the key idea): the diffusion target at timestep t is the latent of
  ``enhance_with_gamma(I_low, num_regions = 2^{⌊t/(T/N)⌋})``, N = 10 luminance layers (coarse labels
  for small t, fine ones for large t). Losses: ε-MSE + λ_scc·L1(DDIM-sampled latent, latent of the
  per-pixel prior) + λ_adv·GAN (a discriminator on the decoded output vs **unpaired** normal-light
  images). Unsupervised: no paired ground truth. The CTDN is frozen in stage 2, as in the code.

The paper trains this for 2500 epochs on 4 GPUs; here it only runs as a smoke test (the loss
decreases, the output is finite). The prior (``eff_vision.lasq.prior``) carries the reproduction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from eff_shared.errors import check_int
from eff_vision.lasq.prior import LASQPrior

__all__ = ["CTDN", "DiffusionUNet", "Discriminator", "LASQConfig", "LASQModel"]


@dataclass
class LASQConfig:
    """Validated configuration (official defaults; the smoke test shrinks channels and T)."""

    ctdn_channels: int = 64
    unet_channels: int = 64
    ch_mult: tuple[int, ...] = (1, 2, 3, 4)
    num_res_blocks: int = 2
    timesteps: int = 1000
    sampling_steps: int = 20
    beta_start: float = 1e-4
    beta_end: float = 0.02
    n_layers: int = 10
    lambda_scc: float = 0.25
    lambda_adv: float = 0.005
    ema: float = 0.999
    lr: float = 2e-5
    prior_mcmc_steps: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("ctdn_channels", "unet_channels", "num_res_blocks", "timesteps", "n_layers"):
            check_int(name, getattr(self, name), minimum=1)
        if not self.ch_mult or any(m < 1 for m in self.ch_mult):
            raise ValueError(f"ch_mult must be positive ints, got {self.ch_mult!r}")
        if not 1 <= self.sampling_steps <= self.timesteps:
            raise ValueError(
                f"sampling_steps must lie in [1, timesteps], got {self.sampling_steps}"
            )
        if not 0 < self.beta_start < self.beta_end < 1:
            raise ValueError("need 0 < beta_start < beta_end < 1")
        if self.n_layers > self.timesteps:
            raise ValueError("n_layers must not exceed timesteps")
        for name in ("lambda_scc", "lambda_adv", "lr"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.ema < 1:
            raise ValueError(f"ema must lie in [0, 1), got {self.ema}")


# --- CTDN ----------------------------------------------------------------------------------------


class _Res(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1), nn.LeakyReLU(), nn.Conv2d(cout, cout, 3, padding=1)
        )
        self.skip = nn.Conv2d(cin, cout, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x) + self.skip(x)


class CTDN(nn.Module):
    """Feature autoencoder: ``encode(x)`` → 3×H/8×W/8 latent in (0, 1); ``decode(x, latent)`` → image."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        c = channels
        self.stem = nn.Sequential(nn.Conv2d(3, c, 5, padding=2), nn.Conv2d(c, c, 5, padding=2))
        self.block0, self.down0 = _Res(c, c), nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.block1, self.down1 = _Res(c, 2 * c), nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.block2, self.down2 = (
            _Res(2 * c, 4 * c),
            nn.Conv2d(4 * c, 4 * c, 3, stride=2, padding=1),
        )
        act = nn.LeakyReLU()
        self.squeeze = nn.Sequential(
            nn.Conv2d(4 * c, 2 * c, 3, padding=1), act, nn.Conv2d(2 * c, c, 3, padding=1), act,
            nn.Conv2d(c, 3, 3, padding=1),
        )  # fmt: skip
        self.lift = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1), act, nn.Conv2d(c, 2 * c, 3, padding=1), act,
            nn.Conv2d(2 * c, 4 * c, 3, padding=1),
        )  # fmt: skip
        self.up_first = nn.ModuleList([_Res(m * c, m * c) for m in (4, 2, 1)])
        self.up_second = nn.ModuleList([_Res(m * c, m * c) for m in (4, 2, 1)])
        self.ups = nn.ModuleList(
            [nn.ConvTranspose2d(a * c, b * c, 3, stride=2, padding=1, output_padding=1)
             for a, b in ((4, 2), (2, 1), (1, 1))]
        )  # fmt: skip
        self.head = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), act, nn.Conv2d(c, 3, 1))

    def pyramid(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        l0 = self.down0(self.block0(self.stem(x)))
        l1 = self.down1(self.block1(l0))
        l2 = self.down2(self.block2(l1))
        return l0, l1, l2

    def encode(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.squeeze(self.pyramid(x)[2]))

    def decode(self, x: Tensor, latent: Tensor) -> Tensor:
        skips = self.pyramid(x)[::-1]  # 1/8, 1/4, 1/2
        h = self.lift(latent)
        for first, second, up, skip in zip(
            self.up_first, self.up_second, self.ups, skips, strict=True
        ):
            h = F.leaky_relu(up(second(first(h) + skip)))
        return self.head(h)


# --- DiffusionUNet -------------------------------------------------------------------------------


def timestep_embedding(t: Tensor, dim: int) -> Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / max(half - 1, 1))
    args = t.float()[:, None] * freqs.to(t.device)[None]
    emb = torch.cat([torch.sin(args), torch.cos(args)], dim=1)
    return F.pad(emb, (0, dim % 2))


def _norm(c: int) -> nn.GroupNorm:
    groups = math.gcd(32, c)
    return nn.GroupNorm(groups, c, eps=1e-6)


class _TimeRes(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int) -> None:
        super().__init__()
        self.n1, self.c1 = _norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = _norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: Tensor, temb: Tensor) -> Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(temb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class _Attn(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm, self.qkv, self.out = _norm(c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).unbind(1)
        a = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(c), dim=-1)  # [b, hw, hw]
        return x + self.out((v @ a.transpose(1, 2)).reshape(b, c, h, w))


class DiffusionUNet(nn.Module):
    """ε-prediction UNet on ``cat(condition, x_t)`` (6 → 3 channels)."""

    def __init__(self, ch: int = 64, ch_mult: tuple[int, ...] = (1, 2, 3, 4), num_res_blocks: int = 2,
                 in_channels: int = 6, out_channels: int = 3) -> None:  # fmt: skip
        super().__init__()
        self.ch, temb = ch, 4 * ch
        self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(in_channels, ch, 3, padding=1)
        self.down, self.downsample = nn.ModuleList(), nn.ModuleList()
        chans, cur = [ch], ch
        for level, mult in enumerate(ch_mult):
            blocks = nn.ModuleList()
            for _ in range(num_res_blocks):
                blocks.append(_TimeRes(cur, ch * mult, temb))
                cur = ch * mult
                chans.append(cur)
            self.down.append(blocks)
            last = level == len(ch_mult) - 1
            self.downsample.append(nn.Identity() if last else nn.Conv2d(cur, cur, 3, 2, 1))
            if not last:
                chans.append(cur)
        self.mid1, self.mid_attn, self.mid2 = (
            _TimeRes(cur, cur, temb),
            _Attn(cur),
            _TimeRes(cur, cur, temb),
        )
        self.up, self.upsample = nn.ModuleList(), nn.ModuleList()
        for level, mult in reversed(list(enumerate(ch_mult))):
            blocks = nn.ModuleList()
            for _ in range(num_res_blocks + 1):
                blocks.append(_TimeRes(cur + chans.pop(), ch * mult, temb))
                cur = ch * mult
            self.up.append(blocks)
            self.upsample.append(nn.Identity() if level == 0 else nn.Conv2d(cur, cur, 3, padding=1))
        self.out = nn.Sequential(_norm(cur), nn.SiLU(), nn.Conv2d(cur, out_channels, 3, padding=1))
        self.levels = len(ch_mult)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        temb = self.temb(timestep_embedding(t, self.ch))
        hs = [self.conv_in(x)]
        for level, blocks in enumerate(self.down):
            for block in blocks:
                hs.append(block(hs[-1], temb))
            if level != self.levels - 1:
                hs.append(self.downsample[level](hs[-1]))
        h = self.mid2(self.mid_attn(self.mid1(hs[-1], temb)), temb)
        for i, blocks in enumerate(self.up):
            for block in blocks:
                h = block(torch.cat([h, hs.pop()], dim=1), temb)
            if i != self.levels - 1:
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(h)


class Discriminator(nn.Module):
    """PatchGAN-style critic on images, global-pooled to one probability (official layout)."""

    def __init__(self, ch: int = 64) -> None:
        super().__init__()
        act = nn.LeakyReLU(0.2)
        self.features = nn.Sequential(
            nn.Conv2d(3, ch, 4, 2, 1), act,
            nn.Conv2d(ch, 2 * ch, 4, 2, 1), nn.InstanceNorm2d(2 * ch), act,
            nn.Conv2d(2 * ch, 4 * ch, 4, 2, 1), nn.InstanceNorm2d(4 * ch), act,
        )  # fmt: skip
        self.head = nn.Linear(4 * ch, 1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.head(self.features(x).mean((2, 3))))


# --- the model -----------------------------------------------------------------------------------


class LASQModel(nn.Module):
    """CTDN + DiffusionUNet + discriminator, trained with the prior's luminance layers as targets.

    ``pretrain_step(x)`` trains the CTDN autoencoder (stage 1, L1 reconstruction);
    ``training_step(low, unpaired_normal)`` is one stage-2 step (a discriminator update, then a
    generator update of the UNet and an EMA update); ``enhance(x, steps)`` runs DDIM inference.
    Inputs are NCHW float tensors in [0, 1] with H, W multiples of 8.
    """

    def __init__(self, config: LASQConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or LASQConfig()
        torch.manual_seed(cfg.seed)
        self.decom = CTDN(cfg.ctdn_channels)
        self.unet = DiffusionUNet(cfg.unet_channels, cfg.ch_mult, cfg.num_res_blocks)
        self.disc = Discriminator(max(8, cfg.unet_channels // 2))
        betas = torch.linspace(cfg.beta_start, cfg.beta_end, cfg.timesteps, dtype=torch.float64)
        self.register_buffer("alphas_bar", torch.cumprod(1 - betas, 0).float(), persistent=False)
        self.prior = LASQPrior(mcmc_steps=cfg.prior_mcmc_steps, seed=cfg.seed)
        self._gen = torch.Generator().manual_seed(cfg.seed)
        self._opt_ae = torch.optim.Adam(self.decom.parameters(), lr=max(cfg.lr, 1e-4))
        self._opt_g = torch.optim.Adam(self.unet.parameters(), lr=cfg.lr)
        self._opt_d = torch.optim.Adam(self.disc.parameters(), lr=cfg.lr)
        self._ema = {k: v.detach().clone() for k, v in self.unet.state_dict().items()}

    @staticmethod
    def _check(name: str, x: Tensor) -> None:
        if not isinstance(x, Tensor) or x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"{name} must be an N×3×H×W tensor")
        if x.shape[2] % 8 or x.shape[3] % 8:
            raise ValueError(
                f"{name} height and width must be multiples of 8, got {tuple(x.shape[2:])}"
            )
        if not torch.isfinite(x).all() or float(x.min()) < 0 or float(x.max()) > 1:
            raise ValueError(f"{name} values must be finite and lie in [0, 1]")

    def _prior_batch(self, low: Tensor, regions: list[int | None]) -> Tensor:
        out = []
        for img, n in zip(low.detach().cpu().permute(0, 2, 3, 1).numpy(), regions, strict=True):
            out.append(self.prior.enhance(np.ascontiguousarray(img, dtype=np.float64), n))
        return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).to(low)

    def _abar(self, t: Tensor) -> Tensor:
        return self.alphas_bar[t].view(-1, 1, 1, 1)

    def ddim(self, cond: Tensor, steps: int, noise: Tensor | None = None) -> Tensor:
        """DDIM (η = 0) sampling of a normalised latent given the normalised condition."""
        skip = max(1, self.config.timesteps // steps)
        seq = list(range(0, self.config.timesteps, skip))
        x = noise if noise is not None else torch.randn(cond.shape, generator=self._gen).to(cond)
        for i, j in zip(reversed(seq), reversed([-1, *seq[:-1]]), strict=True):
            t = torch.full((cond.shape[0],), i, dtype=torch.long, device=cond.device)
            at = self._abar(t)
            at_next = self._abar(torch.full_like(t, j)) if j >= 0 else torch.ones_like(at)
            eps = self.unet(torch.cat([cond, x], 1), t)
            x0 = (x - eps * (1 - at).sqrt()) / at.sqrt()
            x = at_next.sqrt() * x0 + (1 - at_next).sqrt() * eps
        return x

    def pretrain_step(self, x: Tensor) -> dict[str, Tensor]:
        """Stage 1: CTDN autoencoder, L1(decode(x, encode(x)), x)."""
        self._check("x", x)
        self._opt_ae.zero_grad()
        loss = F.l1_loss(self.decom.decode(x, self.decom.encode(x)), x)
        loss.backward()
        self._opt_ae.step()
        return {"recon": loss.detach()}

    def training_step(self, batch_low: Tensor, batch_unpaired_normal: Tensor) -> dict[str, Tensor]:
        """One stage-2 step; returns the detached losses (noise, scc, adv, disc, total)."""
        self._check("batch_low", batch_low)
        self._check("batch_unpaired_normal", batch_unpaired_normal)
        cfg = self.config
        n = batch_low.shape[0]
        for p in self.decom.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            low_fea = 2 * self.decom.encode(batch_low) - 1
        t = torch.randint(0, cfg.timesteps, (n // 2 + 1,), generator=self._gen)
        t = torch.cat([t, cfg.timesteps - t - 1])[:n]
        seg = cfg.timesteps // cfg.n_layers
        regions = [2 ** min(int(ti) // seg, cfg.n_layers - 1) for ti in t]
        with torch.no_grad():
            pixel_fea = self.decom.encode(self._prior_batch(batch_low, [None] * n))
            label_fea = 2 * self.decom.encode(self._prior_batch(batch_low, regions)) - 1
        a = self._abar(t)
        e = torch.randn(label_fea.shape, generator=self._gen).to(label_fea)
        x_t = label_fea * a.sqrt() + e * (1 - a).sqrt()
        eps = self.unet(torch.cat([low_fea, x_t], 1), t)
        pred_fea = (self.ddim(low_fea, cfg.sampling_steps) + 1) / 2
        gen_img = self.decom.decode(batch_low, pred_fea)
        # discriminator step (unpaired normal-light images are "real")
        self._opt_d.zero_grad()
        real = self.disc(batch_unpaired_normal)
        fake = self.disc(gen_img.detach().clamp(0, 1))
        loss_d = 0.5 * (F.binary_cross_entropy(real, torch.ones_like(real))
                        + F.binary_cross_entropy(fake, torch.zeros_like(fake)))  # fmt: skip
        loss_d.backward()
        self._opt_d.step()
        # generator (UNet) step
        self._opt_g.zero_grad()
        noise_loss = F.mse_loss(eps, e)
        scc = cfg.lambda_scc * F.l1_loss(pred_fea, pixel_fea)
        validity = self.disc(gen_img.clamp(0, 1))
        adv = F.binary_cross_entropy(validity, torch.ones_like(validity))
        total = noise_loss + scc + cfg.lambda_adv * adv
        total.backward()
        self._opt_g.step()
        with torch.no_grad():
            for k, v in self.unet.state_dict().items():
                if v.dtype.is_floating_point:
                    self._ema[k].mul_(cfg.ema).add_(v.detach(), alpha=1 - cfg.ema)
        return {
            "noise": noise_loss.detach(), "scc": scc.detach(), "adv": adv.detach(),
            "disc": loss_d.detach(), "total": total.detach(),
        }  # fmt: skip

    @torch.no_grad()
    def enhance(self, x: Tensor, steps: int = 20) -> Tensor:
        """DDIM inference: latent of x → sampled enhanced latent → decoded image, clamped to [0, 1]."""
        self._check("x", x)
        cond = 2 * self.decom.encode(x) - 1
        pred = (self.ddim(cond, steps) + 1) / 2
        return self.decom.decode(x, pred).clamp(0, 1)

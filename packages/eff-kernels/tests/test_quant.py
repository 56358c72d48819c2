import pytest
import torch

from eff_kernels.quant import (
    E2M1_VALUES,
    e2m1_decode,
    e2m1_encode,
    e2m1_round,
    e4m3_round,
    fake_fp4,
    floor_log2,
    fp8_e4m3_per_channel,
    int8_per_block,
    int8_quantize_rows,
    mxfp4_dequantize,
    mxfp4_quantize,
    nvfp4_dequantize,
    nvfp4_quantize,
    pack_nibbles,
    round_half_away,
    row_groups,
    unpack_nibbles,
)


def test_e2m1_rounds_to_nearest_with_ties_to_even_and_saturates():
    x = torch.tensor(
        [0.0, 0.24, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 6.0, 7.0, 100.0]
    )
    expect = torch.tensor([0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, 6.0])
    assert torch.equal(e2m1_round(x), expect)
    assert torch.equal(e2m1_round(-x), -expect)
    # every grid value maps to itself and decodes from its code
    grid = torch.tensor(E2M1_VALUES)
    assert torch.equal(e2m1_decode(e2m1_encode(grid)), grid)
    assert torch.equal(e2m1_encode(-grid[1:]) >> 3, torch.ones(7, dtype=torch.uint8))


def test_e2m1_round_is_the_nearest_grid_point_off_ties():
    x = torch.rand(10_000) * 7
    grid = torch.tensor(E2M1_VALUES)
    nearest = grid[(x[:, None] - grid).abs().argmin(dim=1)]
    assert torch.equal(e2m1_round(x), nearest)


def test_nibble_packing_round_trips_low_nibble_first():
    codes = torch.randint(0, 16, (4, 8), dtype=torch.uint8)
    packed = pack_nibbles(codes)
    assert packed.shape == (4, 4)
    assert torch.equal(packed[:, 0] & 0xF, codes[:, 0]) and torch.equal(
        packed[:, 0] >> 4, codes[:, 1]
    )
    assert torch.equal(unpack_nibbles(packed), codes)
    assert torch.equal(unpack_nibbles(pack_nibbles(codes, dim=0), dim=0), codes)
    with pytest.raises(ValueError, match="even"):
        pack_nibbles(torch.zeros(3, 5, dtype=torch.uint8))


def test_e4m3_round_matches_the_format():
    x = torch.tensor([1.0625, 1.1875, 500.0, -500.0, 0.001, 2.0**-9 * 1.5, 0.0])
    # ties to even (1.0625 -> 1.0, 1.1875 -> 1.25), saturation at 448, subnormals kept (step 2^-9)
    expect = torch.tensor([1.0, 1.25, 448.0, -448.0, 2.0**-10 * 2, 2.0**-8, 0.0])
    assert torch.equal(e4m3_round(x), expect)


def test_nvfp4_blocks_have_e4m3_scales_max_over_6_and_bounded_error():
    torch.manual_seed(0)
    x = torch.randn(4, 64) * 3
    packed, scales = nvfp4_quantize(x)
    assert packed.dtype == torch.uint8 and packed.shape == (4, 32)
    assert scales.dtype == torch.float8_e4m3fn and scales.shape == (4, 4)
    amax = x.reshape(4, 4, 16).abs().amax(-1)
    assert torch.equal(scales.float(), e4m3_round(amax / 6))
    deq = nvfp4_dequantize(packed, scales)
    vals = deq.reshape(4, 4, 16) / scales.float().unsqueeze(-1)
    assert torch.isin(vals.abs(), torch.tensor(E2M1_VALUES)).all()
    # the largest element of each block is within one E2M1 step (relative 1/3 at the top) of itself
    err = (deq - x).abs().reshape(4, 4, 16).amax(-1)
    assert (err <= amax / 6 + 1e-6).all()
    # along another dim (V is quantized along tokens)
    p2, s2 = nvfp4_quantize(x.T.contiguous(), dim=0)
    assert torch.equal(nvfp4_dequantize(p2, s2, dim=0), deq.T)


def test_mxfp4_uses_power_of_two_scales():
    torch.manual_seed(1)
    x = torch.randn(2, 64)
    packed, exps = mxfp4_quantize(x)
    assert exps.dtype == torch.uint8 and exps.shape == (2, 2)
    amax = x.reshape(2, 2, 32).abs().amax(-1)
    assert torch.equal(exps.float() - 127, floor_log2(amax) - 2)
    deq = mxfp4_dequantize(packed, exps)
    assert torch.allclose(fake_fp4(x, "mxfp4"), deq)
    assert (deq - x).abs().max() <= amax.max() / 2  # coarse: saturation at 6·2^e
    with pytest.raises(ValueError, match="multiple of 32"):
        mxfp4_quantize(torch.randn(2, 48))


def test_floor_log2_is_exact_at_powers_of_two():
    x = torch.tensor([1.0, 2.0, 0.5, 3.999, 4.0, 2.0**-20, 0.0])
    assert floor_log2(x).tolist() == [0, 1, -1, 1, 2, -20, -127]


def test_int8_per_block_rounds_half_away_from_zero_with_max_scale():
    assert round_half_away(torch.tensor([0.5, 1.5, -0.5, -2.5, 0.49])).tolist() == [1, 2, -1, -3, 0]
    torch.manual_seed(0)
    x = torch.randn(1, 2, 100, 16)
    q, s = int8_per_block(x, 64, sm_scale=2.0)
    assert q.dtype == torch.int8 and s.shape == (1, 2, 2)
    assert torch.allclose(s[..., 0], (2 * x[:, :, :64]).abs().amax(dim=(-1, -2)) / 127)
    assert torch.allclose(s[..., 1], (2 * x[:, :, 64:]).abs().amax(dim=(-1, -2)) / 127)
    rows = torch.arange(100) // 64
    deq = q.float() * s[..., rows].unsqueeze(-1)
    assert ((deq - 2 * x).abs() <= s[..., rows].unsqueeze(-1) / 2 + 1e-6).all()
    assert q.abs().max() == 127


def test_row_groups_follow_the_mma_layouts():
    g, n = row_groups(256, "q", "per_thread")
    assert n == 16 and g[:9].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 0] and g[128] == 8
    g, n = row_groups(64, "k", "per_thread")
    assert n == 4 and g[:8].tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and g[8] == 0
    g, n = row_groups(70, "q", "per_warp")
    assert n == 3 and g[31] == 0 and g[32] == 1
    with pytest.raises(ValueError, match="qk_granularity"):
        row_groups(8, "q", "per_lane")
    x = torch.randn(1, 1, 16, 4)
    _, rs = int8_quantize_rows(x, torch.arange(16) % 2, 2)
    assert torch.allclose(rs[..., 0], x[..., 0::2, :].abs().amax() / 127)


def test_fp8_per_channel_scales_by_channel_max():
    torch.manual_seed(0)
    x = torch.randn(1, 1, 50, 8) * torch.arange(1, 9)
    q, s = fp8_e4m3_per_channel(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (1, 1, 1, 8)
    assert torch.allclose(s, x.abs().amax(-2, keepdim=True) / 448)
    assert torch.allclose(q.float() * s, x, rtol=0.07, atol=1e-6)
    _, s2 = fp8_e4m3_per_channel(x, max_value=2.25)
    assert torch.allclose(s2, x.abs().amax(-2, keepdim=True) / 2.25)
    with pytest.raises(ValueError, match="max_value"):
        fp8_e4m3_per_channel(x, max_value=500)

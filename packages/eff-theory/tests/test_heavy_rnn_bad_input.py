import pytest

from eff_theory.heavy_rnn import sample_levy_stable


@pytest.mark.parametrize("size", [-1, (3, -2)])
def test_negative_size_raises_naming_size(size):
    with pytest.raises(ValueError, match="size must be >= 0"):
        sample_levy_stable(1.5, size)


@pytest.mark.parametrize("size", [2.5, "3", (2, 1.0), True])
def test_non_integer_size_raises(size):
    with pytest.raises(TypeError, match="size must be an int or a tuple of ints"):
        sample_levy_stable(1.5, size)


def test_valid_sizes_still_draw():
    assert sample_levy_stable(1.5, 0, rng=0).shape == (0,)
    assert sample_levy_stable(1.5, (2, 3), rng=0).shape == (2, 3)

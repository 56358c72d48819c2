import numpy as np
import pytest

from eff_rl.metrics import auc


def test_auc_of_an_empty_or_nan_curve_raises():
    with pytest.raises(ValueError, match="success must hold at least one bin"):
        auc([])
    with pytest.raises(ValueError, match="success must be finite"):
        auc(np.array([0.5, np.nan]))
    assert auc([0.0, 0.5, 1.0]) == pytest.approx(0.5)

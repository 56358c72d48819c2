import eff_rl
from eff_rl.cli import app
from eff_shared.testing import check_domain_package


def test_domain_package_plumbing():
    check_domain_package("eff-rl", eff_rl, app, uses_torch=True)

import eff_kernels
from eff_kernels.cli import app
from eff_shared.testing import check_domain_package


def test_domain_package_plumbing():
    check_domain_package("eff-kernels", eff_kernels, app, uses_torch=True)

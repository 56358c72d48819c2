import eff_vision
from eff_shared.testing import check_domain_package
from eff_vision.cli import app


def test_domain_package_plumbing():
    check_domain_package("eff-vision", eff_vision, app, uses_torch=True)

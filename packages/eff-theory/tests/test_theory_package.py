import eff_theory
from eff_shared.testing import check_domain_package
from eff_theory.cli import app


def test_domain_package_plumbing():
    check_domain_package("eff-theory", eff_theory, app, uses_torch=False)

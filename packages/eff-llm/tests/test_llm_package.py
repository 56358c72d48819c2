import eff_llm
from eff_llm.cli import app
from eff_shared.testing import check_domain_package


def test_domain_package_plumbing():
    check_domain_package("eff-llm", eff_llm, app, uses_torch=True)

import eff_games
from eff_games.cli import app
from eff_shared.testing import check_domain_package


def test_domain_package_plumbing():
    check_domain_package("eff-games", eff_games, app, uses_torch=False)

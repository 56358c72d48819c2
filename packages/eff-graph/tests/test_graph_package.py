import eff_graph
from eff_graph.cli import app
from eff_shared.testing import check_domain_package


def test_domain_package_plumbing():
    check_domain_package("eff-graph", eff_graph, app, uses_torch=True)

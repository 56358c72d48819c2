"""`eff graph ...`: the command-line entry of eff-graph, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-graph", torch_report=True)

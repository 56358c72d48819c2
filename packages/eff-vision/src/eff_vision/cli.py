"""`eff vision ...`: the command-line entry of eff-vision, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-vision", torch_report=True)

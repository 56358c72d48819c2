"""`eff rl ...`: the command-line entry of eff-rl, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-rl", torch_report=True)

"""`eff theory ...`: the command-line entry of eff-theory, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-theory")

"""`eff kernels ...`: the command-line entry of eff-kernels, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-kernels", torch_report=True)

"""`eff llm ...`: the command-line entry of eff-llm, plugged into `eff` via `eff.commands`."""

from eff_shared.cli import domain_app

app = domain_app("eff-llm", torch_report=True)

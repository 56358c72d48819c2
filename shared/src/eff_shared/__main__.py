"""``python -m eff_shared`` is the ``eff`` command."""

from eff_shared.cli import main

main()

"""The ``attnkit`` command (and ``python -m attnkit``): the zygotes' seed starts before the command
line's own imports (torch and all), so that both run at once (``attnkit.driver.seed``)."""

from __future__ import annotations

import sys

from attnkit.driver import seed


def run() -> None:
    seed.start_for(sys.argv[1:])
    from attnkit.cli import run as run_command

    run_command()

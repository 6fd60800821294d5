"""`python -m planner` and the `planner` script. `planner --version` alone answers here,
before the command line (planner.cli: typer's app, every command) is even imported; output
that cannot be written goes to planner.cli, which ends it as every command's output does."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from planner import __version__

        try:
            print(f"planner {__version__}")
            sys.stdout.flush()
        except OSError:
            pass  # planner.cli prints it again and ends as the error says
        else:
            sys.exit(0)
    from planner.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()

"""The one console policy: every rich Console that planner prints through is made here.

- Width: COLUMNS, when set, wins (also when piped, so `COLUMNS=80 planner plan ... | less` lays
  out for 80 columns); else the terminal's width; a pipe or file without COLUMNS gets
  `pipe_width` (rich would take 80): PIPE_WIDTH for the training views, SERVE_PIPE_WIDTH for
  the serving views (laid out for 80).
- Text: every string is literal. No markup, no emoji codes, no highlighting (the views pass
  `Text`; a string printed directly, a model called `Llama [v2]` or `:x:`, prints as written),
  and no soft wrapping.
- A closed pipe raises BrokenPipeError (rich's own handling would exit 1), for the CLI to end
  as a process that SIGPIPE ends (planner.cli `_run`).

rich is imported when a console is made, not with this module.
"""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["PIPE_WIDTH", "SERVE_PIPE_WIDTH", "make_console", "print_note"]

PIPE_WIDTH = 132
"""Width of output that goes to a pipe or file when COLUMNS does not say (rich would take 80)."""

SERVE_PIPE_WIDTH = 100
"""The same for the serving views (`planner serve`, `validate` of a serving config)."""


def make_console(*, stderr: bool = False, pipe_width: int = PIPE_WIDTH) -> Console:
    """A console on stdout (or stderr) with the policy above."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None
    settings = dict(stderr=stderr, markup=False, emoji=False, highlight=False, soft_wrap=False)
    console = _Console(width=width, **settings)
    if width is None and not console.is_terminal:
        console = _Console(width=pipe_width, **settings)
    return console


def print_note(console: Console, text: str) -> None:
    """A line of prose, printed as written and wrapped at the console's width."""
    from rich.text import Text

    console.print(Text(text))

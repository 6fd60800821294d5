"""Read a bash launch script without running it: its commands, with variables expanded, and
the files it writes itself.

Scripts are read, not run: nothing is executed, no file is written and the environment is not
read. The reader parses the bash a launch script uses (comments, `\\` continuations, quoting,
`NAME=value` also after export/declare/local/readonly, arrays `NAME=( ... )` / `NAME+=( ... )`
with `${NAME[@]}`, `$NAME`, `${NAME:-x}` `${NAME-x}` `${NAME:=x}` `${NAME:+x}`, `$((...))`,
word splitting, `;` `&&` `||` `|` `&`, redirections, here-documents) and follows its control
flow: `if/elif/else`, `case`, `for`, `while`, functions (run where they are called), `{ }` and
`( )`, `bash -c "..."`, `eval`, and a here-document fed to `bash`/`sh`/`sbatch`.

Conditions (`[ ]`, `[[ ]]`, `test`, `(( ))`, `&&`/`||` chains) are decided on the values the
script gives: defaults, assignments and the `env` the caller passes (planner's `--set`). A
condition that depends on anything else is *undecided*; the reader then takes the branch a
plain run takes (no arguments, nothing in the environment: unset variables are empty, the
files it names exist, the commands it runs succeed, and a branch that exits with an error is
not taken on a guess) and records it in `Script.notes`.

Files the script writes (`cat <<EOF > F`, `echo ... > F`, `sed ... TEMPLATE > F`, `cp`) are kept
in `Script.files`; a file it reads that it did not write comes from `read_file` (the caller's,
None = unknown). `#SBATCH --nodes/--ntasks-per-node/--gpus-per-node/--gres` set SLURM_NNODES,
SLURM_JOB_NUM_NODES, SLURM_NTASKS_PER_NODE and SLURM_GPUS_PER_NODE as sbatch does.

A value that depends on a variable the script never sets (without a default), on a positional
parameter or on a command substitution comes out *unresolved*: a marker (`unresolved(name)`)
that callers name in their messages (`unresolved_names`, `display`).

Bounded: a value or word longer than MAX_VALUE characters, an array over MAX_ITEMS elements,
more than MAX_PRODUCED characters expanded in all, nesting deeper than MAX_DEPTH, arithmetic
outside bash's 64-bit integers, more than MAX_ITERATIONS loop turns or function calls, or
reading for more than BUDGET_S seconds is one SpecError naming the limit.

The package by job: `lexer` (characters to tokens), `parser` (tokens to a tree), `arith`
(64-bit arithmetic), `interp` (following the tree), `conditions` (`[ ]`, `[[ ]]`, `test`),
`output` (what cat/echo/printf/sed/envsubst/tee print), `common` (the unresolved markers and
the limit error). The limits below live here and are read from here when checked: setting
`planner.readers.bash.BUDGET_S` (or a MAX_*) holds for the whole reader.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "Command",
    "Script",
    "run",
    "unresolved",
    "unresolved_names",
    "only_unresolved",
    "display",
    "why",
    "MAX_VALUE",
    "MAX_ITEMS",
    "MAX_PRODUCED",
    "MAX_DEPTH",
    "MAX_ITERATIONS",
    "BUDGET_S",
]

MAX_VALUE = 1_000_000
"""Characters in one variable value or one expanded word."""
MAX_ITEMS = 100_000
"""Elements in one bash array."""
MAX_PRODUCED = 50_000_000
"""Characters expanded while reading one script, in all."""
MAX_DEPTH = 64
"""Nesting of compound commands, ${...}, $((...)), bash -c and eval."""
MAX_ITERATIONS = 10_000
"""Loop turns and function calls while reading one script."""
BUDGET_S = 5.0
"""Wall-clock seconds for reading one script."""

# the stages read the limits above from this package when they check them
from planner.readers.bash.common import (  # noqa: E402 (after the knobs they read)
    _limit,
    display,
    only_unresolved,
    unresolved,
    unresolved_names,
    why,
)
from planner.readers.bash.interp import Command, Script, _Exit, _Return, _Shell  # noqa: E402


def run(
    text: str,
    *,
    env: dict[str, str] | None = None,
    read_file: Callable[[str], str | None] | None = None,
    budget_s: float | None = None,
) -> Script:
    """Read a script: follow its control flow, apply its assignments, expand every other
    command. `env` is the environment and positional parameters ("1", "2", ...) the run would
    have (planner's --set); `read_file(path)` gives a file the script reads but does not write
    (None: unknown)."""
    env = dict(env or {})
    sh = _Shell(env, read_file, BUDGET_S if budget_s is None else budget_s)
    try:
        sh.run_text(text, 0)
    except (_Exit, _Return):
        pass
    except RecursionError:
        raise _limit("the script nests too deeply to read", sh.line) from None
    unused = []
    for name in sorted(sh.env_names - sh.env_read):
        line = sh.env_overwritten.get(name)
        unused.append(
            f"{name}: the script sets it itself (line {line}) before reading it"
            if line
            else f"{name}: the script never reads ${name}"
        )
    for k in sorted(sh.env_positional - {int(n) for n in sh.env_read if n.isdigit()}):
        unused.append(f"{k}: the script never reads ${k}")
    return Script(
        sh.commands,
        dict(sh.vars),
        sh.sourced,
        dict(sh.files),
        sh.notes,
        sh.problems,
        unused,
        sh.missing,
    )

"""The bash interpreter: follows a parsed script's control flow, applies its assignments,
expands words (parameters, arrays, word splitting, globs as patterns), decides conditions on
the values the script gives (noting the guesses of a plain run), runs its functions, `bash -c`,
`eval` and fed here-documents, keeps the files it writes, and records every other command.
Owns Command and Script, the results."""

from __future__ import annotations

import fnmatch
import posixpath
import re
import time
from dataclasses import dataclass, field

# the limits are read from the package (planner.readers.bash.MAX_DEPTH ...) when they
# are checked, so setting one there holds for every stage
from planner.readers import bash as knobs
from planner.readers.bash.arith import _Arith64, _ArithError
from planner.readers.bash.common import (
    _CHUNK_RE,
    _NAME_RE,
    _limit,
    _path_key,
    display,
    unresolved,
    unresolved_names,
)
from planner.readers.bash.conditions import _plain_value, _TestEval
from planner.readers.bash.lexer import (
    _Arith,
    _Array,
    _Lexer,
    _Lit,
    _Part,
    _plain,
    _Redir,
    _Sub,
    _Var,
)
from planner.readers.bash.output import _stdout
from planner.readers.bash.parser import (
    _AndOr,
    _ArithCmd,
    _Case,
    _Func,
    _Group,
    _If,
    _Loop,
    _parse,
    _Pipe,
    _Simple,
)

_ASSIGN_RE = re.compile(r"([A-Za-z_]\w*)(\[[^\]]*\])?(\+?)=(.*)", re.DOTALL)
_PREFIX_WORDS = frozenset({"time", "exec", "nohup", "command", "builtin", "noglob"})
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_SLURM = {
    "nodes": ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
    "N": ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
    "ntasks-per-node": ("SLURM_NTASKS_PER_NODE",),
    "gpus-per-node": ("SLURM_GPUS_PER_NODE",),
    "ntasks": ("SLURM_NTASKS",),
}


@dataclass(frozen=True)
class Command:
    """One simple command after expansion: its words (fields), the line it starts on, and the
    words of the command that runs it (`srun ... bash -c`, `sbatch <<EOF`), if any."""

    line: int
    words: tuple[str, ...]
    prefix: tuple[str, ...] = ()


@dataclass
class Script:
    """What reading the script leaves: commands, variables, sourced files, the files it writes,
    the undecided conditions and branches taken (`notes`), and `--set` values it never read."""

    commands: list[Command]
    variables: dict[str, str | list[str]]
    sourced: list[str] = field(default_factory=list)
    files: dict[str, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unused_env: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # files it reads that were not found

    def var(self, name: str) -> str | None:
        value = self.variables.get(name)
        if isinstance(value, list):
            return value[0] if value else ""
        return value

    def file(self, name: str) -> tuple[bool, str | None]:
        """(the script writes it, its text if planner could follow how)."""
        key = _path_key(name)
        return (key in self.files, self.files.get(key))


@dataclass(frozen=True)
class _St:
    """A command's exit status, and the guesses it rests on (empty: decided)."""

    code: int
    guess: tuple[str, ...] = ()


_OK = _St(0)


class _Exit(Exception):
    pass


def _code(exc: Exception) -> int:
    arg = exc.args[0] if exc.args else "0"
    return int(arg) if str(arg).isdigit() else 1


class _Return(Exception):
    pass


class _Shell:
    def __init__(self, env: dict[str, str], read_file, budget_s: float) -> None:
        self.vars: dict[str, str | list[str]] = {}
        self.positional: list[str] = []
        self.funcs: dict[str, object] = {}
        self.files: dict[str, str | None] = {}
        self.commands: list[Command] = []
        self.sourced: list[str] = []
        self.notes: list[str] = []
        self.problems: list[str] = []
        self.missing: list[str] = []
        self.read_file = read_file
        self.deadline = time.monotonic() + budget_s
        self.budget_s = budget_s
        self.produced = 0
        self.turns = 0
        self.line = 0
        self.prefix: tuple[str, ...] = ()
        self.active: set[str] = set()
        positional = {int(k): v for k, v in env.items() if k.isdigit() and int(k) > 0}
        if positional:
            self.positional = [positional.get(i, "") for i in range(1, max(positional) + 1)]
        self.env_names = {k for k in env if not k.isdigit()}
        self.env_positional = set(positional)
        self.env_read: set[str] = set()
        self.env_overwritten: dict[str, int] = {}
        for k, v in env.items():
            if not k.isdigit():
                self.vars[k] = v

    # bookkeeping -------------------------------------------------------------------------
    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _limit(
                f"reading took more than {self.budget_s:g} s (planner's budget for one file)",
                self.line,
            )

    def turn(self) -> None:
        self.turns += 1
        if self.turns > knobs.MAX_ITERATIONS:
            raise _limit(
                f"more than {knobs.MAX_ITERATIONS:,} loop turns and function calls", self.line
            )

    def count(self, n: int) -> None:
        if n > knobs.MAX_VALUE:
            raise _limit(f"a value grows past {knobs.MAX_VALUE:,} characters", self.line)
        self.produced += n
        if self.produced > knobs.MAX_PRODUCED:
            raise _limit(
                f"the script expands to more than {knobs.MAX_PRODUCED:,} characters", self.line
            )

    def note_read(self, name: str) -> None:
        if name in self.env_names and name not in self.env_overwritten:
            self.env_read.add(name)

    def set_var(self, name: str, value: str | list[str]) -> None:
        if isinstance(value, list):
            if len(value) > knobs.MAX_ITEMS:
                raise _limit(f"array {name} grows past {knobs.MAX_ITEMS:,} elements", self.line)
        elif len(value) > knobs.MAX_VALUE:
            raise _limit(f"variable {name} grows past {knobs.MAX_VALUE:,} characters", self.line)
        if name in self.env_names and name not in self.env_read:
            self.env_overwritten.setdefault(name, self.line)
        self.vars[name] = value

    def get(self, name: str):
        if name.isdigit():
            k = int(name)
            if k in self.env_positional:
                self.env_read.add(name)
            if k == 0:
                return "script.sh"
            return self.positional[k - 1] if k <= len(self.positional) else None
        if name in ("@", "*"):
            self.env_read.update(str(k) for k in self.env_positional)
            return list(self.positional)
        if name == "#":
            return str(len(self.positional))
        self.note_read(name)
        return self.vars.get(name)

    # values ------------------------------------------------------------------------------
    def _value(self, v: _Var) -> str | list[str]:
        """A variable reference's value: a string, or a list for a quoted [@]."""
        if v.op == "unsupported":
            return unresolved(v.raw)
        val = self.get(v.name)
        is_set = val is not None
        null = not is_set or val in ("", [])
        if v.op in (":-", "-") and (null if v.op == ":-" else not is_set):
            return self.join(v.arg or [])
        if v.op in (":=", "=") and (null if v.op == ":=" else not is_set):
            value = self.join(v.arg or [])
            if not v.name.isdigit():
                self.set_var(v.name, value)
            return value
        if v.op in (":?", "?") and (null if v.op == ":?" else not is_set):
            return unresolved("$" + v.name)
        if v.op in (":+", "+"):
            return self.join(v.arg or []) if (not null if v.op == ":+" else is_set) else ""
        if not is_set:
            return unresolved("$" + v.name)
        if isinstance(val, list):
            if v.index in ("@", "*") or v.name in ("@", "*"):
                return list(val)
            try:
                k = int(v.index or 0)
            except ValueError:
                return unresolved(v.raw)
            return val[k] if 0 <= k < len(val) else ""
        return [val] if v.index in ("@", "*") else val

    def _arith(self, a: _Arith) -> str:
        expr = self.join(a.parts)
        if unresolved_names(expr):
            return unresolved(unresolved_names(expr)[0])

        def lookup(name: str) -> str | None:
            value = self.get(name)
            value = value[0] if isinstance(value, list) and value else value
            return None if value is None else (value or "0")

        try:
            return str(_Arith64(expr, lookup, self.line).value())
        except _ArithError as exc:
            name = str(exc)
            return unresolved("$" + name if _NAME_RE.fullmatch(name) else a.raw)

    def _piece(self, part: _Part):
        """(value, splittable) for one part; value is a str or a list (quoted [@])."""
        if isinstance(part, _Lit):
            return part.text, False
        if isinstance(part, _Var):
            value = self._value(part)
            if isinstance(value, list) and not part.quoted:
                value = " ".join(value)
            return value, not part.quoted
        if isinstance(part, _Sub):
            return unresolved(" ".join(part.text.split())[:60]), not part.quoted
        if isinstance(part, _Arith):
            return self._arith(part), not part.quoted
        return "", False

    def join(self, parts: list[_Part]) -> str:
        """A word's value without field splitting (assignments, defaults)."""
        out, total = [], 0
        for part in parts:
            value, _ = self._piece(part)
            text = " ".join(value) if isinstance(value, list) else value
            total += len(text)
            if total > knobs.MAX_VALUE:
                self.count(total)
            out.append(text)
        self.count(total)
        return "".join(out)

    def expand(self, parts: list[_Part]) -> list[str]:
        """A word's fields after expansion and word splitting."""
        fields: list[str] = []
        cur, have, total = "", False, 0
        for part in parts:
            value, split = self._piece(part)
            total += sum(map(len, value)) if isinstance(value, list) else len(value)
            if total > knobs.MAX_VALUE and not isinstance(value, list):
                self.count(total)
            if isinstance(value, list):  # "${ARR[@]}": one field per element
                for k, item in enumerate(value):
                    if k:
                        fields.append(cur)
                        cur = ""
                    cur += item
                    have = True
                continue
            if not split:
                cur += value
                have = True
                continue
            if not value:
                continue
            chunks = _CHUNK_RE.findall(value)
            if value[0].isspace() and have:
                fields.append(cur)
                cur, have = "", False
            for k, chunk in enumerate(chunks):
                if k:
                    fields.append(cur)
                    cur = ""
                cur += chunk
                have = True
            if value[-1].isspace() and have:
                fields.append(cur)
                cur, have = "", False
        if have:
            fields.append(cur)
        self.produced += total
        if self.produced > knobs.MAX_PRODUCED:
            self.count(0)
        return fields

    def pattern(self, parts: list[_Part]) -> str:
        """A glob pattern: quoted parts match literally."""
        out = []
        for part in parts:
            value, _ = self._piece(part)
            text = " ".join(value) if isinstance(value, list) else value
            quoted = getattr(part, "quoted", False)
            out.append(re.sub(r"([*?\[])", r"[\1]", text) if quoted else text)
        return "".join(out)

    # assignments -------------------------------------------------------------------------
    def assign(self, word: list[_Part]) -> bool:
        """Apply `NAME=value` / `NAME=( ... )` / `NAME+=...`; False if not an assignment."""
        if not word or not isinstance(word[0], _Lit) or word[0].quoted:
            return False
        m = _ASSIGN_RE.fullmatch(word[0].text)
        if not m:
            return False
        name, index, append, rest = m.group(1), m.group(2), m.group(3), m.group(4)
        tail = ([_Lit(rest, False)] if rest else []) + list(word[1:])
        if tail and isinstance(tail[0], _Array):
            items = [f for w in tail[0].words for f in self.expand(w)]
            old = self.vars.get(name) if append else None
            old = old if isinstance(old, list) else ([old] if old else [])
            if append:
                self.note_read(name)
            self.set_var(name, (old + items) if append else items)
            return True
        value = self.join(tail)
        if index:
            cur = self.vars.get(name)
            try:
                k = int(self.join(_Lexer(index[1:-1]).word(stop=frozenset())))
            except ValueError:
                return True
            if not 0 <= k < knobs.MAX_ITEMS:
                raise _limit(f"array {name} grows past {knobs.MAX_ITEMS:,} elements", self.line)
            cur = cur if isinstance(cur, list) else ([cur] if cur else [])
            cur = cur + [""] * (k + 1 - len(cur))
            cur[k] = value
            self.set_var(name, cur)
            return True
        if append:
            self.note_read(name)
            old = self.vars.get(name) or ""
            value = (old[0] if isinstance(old, list) and old else old or "") + value
        self.set_var(name, value)
        return True

    # running -----------------------------------------------------------------------------
    def run_text(self, text: str, depth: int, prefix: tuple[str, ...] = ()) -> _St:
        if depth > knobs.MAX_DEPTH:
            raise _limit(f"bash -c / eval nest deeper than {knobs.MAX_DEPTH} levels", self.line)
        for line in re.findall(r"^#SBATCH[ \t]+(.*)$", text, re.M):
            self.sbatch(line)
        tree, problems = _parse(text, depth)
        self.problems += problems
        saved = self.prefix
        self.prefix = prefix or self.prefix
        try:
            return self.run_list(tree, depth)
        finally:
            self.prefix = saved

    def sbatch(self, line: str) -> None:
        """#SBATCH --nodes=N (and the like) set the SLURM variables sbatch sets."""
        words = line.split("#", 1)[0].split()
        for k, w in enumerate(words):
            name, eq, value = w.lstrip("-").partition("=")
            if not eq and k + 1 < len(words) and w.startswith("-"):
                value = words[k + 1]
            if name == "gres" and value.startswith("gpu:"):
                name, value = "gpus-per-node", value.rsplit(":", 1)[-1]
            for var in _SLURM.get(name, ()):
                if value and var not in self.env_names:
                    self.vars[var] = value

    def run_list(self, items: list, depth: int) -> _St:
        st = _OK
        for item in items:
            st = self.run_and_or(item, depth)
        return st

    def run_and_or(self, node: _AndOr, depth: int) -> _St:
        st = self.run_pipe(node.first, depth)
        for op, pipe in node.rest:
            go = (st.code == 0) if op == "&&" else (st.code != 0)
            first = node.first.cmds[0]
            if st.guess and _is_test(first):
                self.note(
                    first.line,
                    first.text,
                    st,
                    ("ran" if go else "skipped") + f" what follows `{op}`",
                )
            if go:
                nxt = self.run_pipe(pipe, depth)
                st = _St(nxt.code, nxt.guess)
        return st

    def run_pipe(self, pipe: _Pipe, depth: int) -> _St:
        data: str | None = None
        st = _OK
        for k, cmd in enumerate(pipe.cmds):
            st, data = self.run_cmd(
                cmd, depth, stdin=data if k else None, piped=k + 1 < len(pipe.cmds)
            )
        if pipe.negate:
            st = _St(0 if st.code else 1, st.guess)
        return st

    def run_cmd(
        self, node, depth: int, stdin: str | None = None, piped: bool = False
    ) -> tuple[_St, str | None]:
        self.tick()
        if isinstance(node, _Simple):
            return self.run_simple(node, depth, stdin, piped)
        if isinstance(node, _If):
            return self.run_if(node, depth), None
        if isinstance(node, _Loop):
            return self.run_loop(node, depth), None
        if isinstance(node, _Case):
            return self.run_case(node, depth), None
        if isinstance(node, _Group):
            if not node.subshell:
                return self.run_list(node.body, depth), None
            saved = (dict(self.vars), list(self.positional))
            try:
                return self.run_list(node.body, depth), None
            except _Exit as exc:
                return _St(_code(exc)), None
            finally:
                self.vars, self.positional = saved
        if isinstance(node, _Func):
            self.funcs[node.name] = node.body
            return _OK, None
        if isinstance(node, _ArithCmd):
            self.line = node.line
            value = self._arith(
                _Arith(
                    _Lexer(node.text, depth + 1).word(stop=frozenset()),
                    False,
                    raw=f"(({node.text}))",
                )
            )
            if unresolved_names(value):
                return _St(1, (f"{display(value)} is not known",)), None
            return _St(0 if int(value) else 1), None
        return _OK, None

    # control flow ------------------------------------------------------------------------
    def note(self, line: int, text: str, st: _St, taken: str) -> None:
        text = " ".join((text or "a condition").split())
        text = text if len(text) <= 60 else text[:57] + "..."
        self.notes.append(f"line {line}: `{text}` ({'; '.join(dict.fromkeys(st.guess))}): {taken}")

    def run_if(self, node: _If, depth: int) -> _St:
        for k, (cond, body, text) in enumerate(node.branches):
            st = self.run_list(cond, depth)
            take = st.code == 0
            if st.guess:
                rest = node.branches[k + 1 :]
                other = rest[0][1] if rest else node.orelse
                if _exits(body if take else other) and not _exits(other if take else body):
                    take = not take
                line = _first_line(cond) or node.line
                self.note(line, text, st, "took its branch" if take else "skipped its branch")
            if take:
                return self.run_list(body, depth)
        if node.orelse is not None:
            return self.run_list(node.orelse, depth)
        return _OK

    def run_loop(self, node: _Loop, depth: int) -> _St:
        self.line = node.line
        if node.kind != "for":
            st = self.run_list(node.cond or [], depth)
            if (st.code == 0) == (node.kind == "until") and not st.guess:
                return _OK
            self.turn()
            return self.run_list(node.body, depth)  # read once
        if node.header is not None:
            return self.run_arith_for(node, depth)
        items = (
            list(self.positional)
            if node.items is None
            else [f for w in node.items for f in self.expand(w)]
        )
        st = _OK
        for item in items or [None]:
            self.turn()
            if node.var and item is not None:
                self.set_var(node.var, item)
            st = self.run_list(node.body, depth)
        return st

    def run_arith_for(self, node: _Loop, depth: int) -> _St:
        """`for (( init; cond; step ))`: turns while cond is non-zero, each one counted against
        MAX_ITERATIONS; a condition planner cannot evaluate reads the body once (a note)."""
        init, cond, step = node.header
        shown = f"for (({init};{cond};{step}))"
        st = _OK
        if self.arith_stmt(init, depth) is None:
            return self._arith_once(node, depth, shown, init)
        while True:
            ok = self.arith_stmt(cond, depth) if cond.strip() else 1
            if ok is None:
                return self._arith_once(node, depth, shown, cond)
            if not ok:
                return st
            self.turn()
            st = self.run_list(node.body, depth)
            if self.arith_stmt(step, depth) is None:
                return st

    def _arith_once(self, node: _Loop, depth: int, shown: str, part: str) -> _St:
        self.note(
            node.line, shown, _St(1, (f"(({part.strip()})) is not known",)), "read its body once"
        )
        self.turn()
        return self.run_list(node.body, depth)

    def arith_stmt(self, text: str, depth: int) -> int | None:
        """A `(( ))` statement with bash's assignments (`i = 0`, `i += 2`, `i++`, `--i`,
        comma lists): the value of the last, None if it needs what planner does not know."""
        value: int | None = 0
        for piece in text.split(","):
            expr = self.join(_Lexer(piece, depth + 1).word(stop=frozenset())).strip()
            if unresolved_names(expr):
                return None
            m = _ARITH_ASSIGN.fullmatch(expr)
            if m is None:
                value = self._arith_int(expr)
            else:
                name, op, rhs = (
                    m.group("name") or m.group("pre"),
                    m.group("op") or "",
                    m.group("rhs"),
                )
                if m.group("inc") or m.group("preinc"):
                    sign = "+" if (m.group("inc") or m.group("preinc")) == "++" else "-"
                    old = self._arith_int(name)
                    new = None if old is None else self._arith_int(f"{old}{sign}1")
                    value = new if m.group("preinc") else old
                else:
                    rhs_value = self._arith_int(rhs)
                    new = (
                        rhs_value
                        if not op or rhs_value is None
                        else self._arith_int(f"({self._arith_int(name)}){op}({rhs_value})")
                    )
                    value = new
                if new is None:
                    return None
                self.set_var(name, str(new))
            if value is None:
                return None
        return value

    def _arith_int(self, expr: str) -> int | None:
        def lookup(name: str) -> str | None:
            got = self.get(name)
            got = got[0] if isinstance(got, list) and got else got
            return None if got is None else (got or "0")

        try:
            return _Arith64(expr, lookup, self.line).value()
        except _ArithError:
            return None

    def run_case(self, node: _Case, depth: int) -> _St:
        self.line = node.line
        subject = self.join(node.subject)
        value, guess = _plain_value(subject)
        for patterns, body in node.arms:
            pats = [self.pattern(p) for p in patterns]
            if value is None:
                hit = "*" in pats
            else:
                hit = any(fnmatch.fnmatchcase(value, p) for p in pats)
            if hit:
                if guess:
                    self.note(
                        node.line,
                        node.text,
                        _St(0, tuple(guess)),
                        f"took the `{'|'.join(display(p) for p in pats)})` arm",
                    )
                return self.run_list(body, depth)
        return _OK

    # simple commands ---------------------------------------------------------------------
    def run_simple(
        self, node: _Simple, depth: int, stdin: str | None, piped: bool
    ) -> tuple[_St, str | None]:
        self.line = node.line
        words = list(node.words)
        execs = False
        while words and _plain(words[0]) in _PREFIX_WORDS:
            execs = execs or _plain(words[0]) == "exec"
            words.pop(0)
        k = 0
        while k < len(words) and self.assign(words[k]):
            k += 1
        words = words[k:]
        stdin = self.stdin(node.redirs, stdin)
        if not words:
            return _OK, None
        head = _plain(words[0])
        if head == "[[":
            fields = [self.join(w) for w in words]
            pats = [self.pattern(w) for w in words]
            return self.test(
                fields[1:-1] if fields[-1] == "]]" else fields[1:], pats[1:], double=True
            ), None
        if head in _DECLARE:
            for w in words[1:]:
                if not (_plain(w) or "").startswith("-") and not self.assign(w):
                    name = _plain(w)
                    if name and head == "export" and name in self.env_names:
                        self.note_read(name)
            return _OK, None
        fields = [f for w in words for f in self.expand(w)]
        if not fields:
            return _OK, None
        st, out = self.builtin(fields, node, depth, stdin)
        if execs:
            raise _Exit("0")  # exec replaces the shell: nothing after runs
        if st is not None:
            return st, out
        writes = (
            piped or self.stdout_target(node.redirs) or posixpath.basename(fields[0]) == "tee"
        )  # tee writes its files either way
        out = _stdout(fields, stdin, self) if writes else None
        self.write(node.redirs, out)
        return _OK, out

    def stdin(self, redirs: list[_Redir], stdin: str | None) -> str | None:
        for red in redirs:
            if red.body is not None:
                stdin = self.join(red.body)
            elif red.op == "<" and red.target is not None:
                stdin = self.read(self.join(red.target))
        return stdin

    def stdout_target(self, redirs: list[_Redir]) -> list[tuple[str, bool]]:
        out = []
        for red in redirs:
            if (
                red.op in (">", ">>", ">|", "&>", "&>>")
                and red.fd in ("", "1")
                and red.target is not None
            ):
                path = self.join(red.target)
                if path not in ("/dev/null", "/dev/stdout", "/dev/stderr"):
                    out.append((path, red.op.endswith(">>")))
        return out

    def write(self, redirs: list[_Redir], out: str | None) -> None:
        for path, append in self.stdout_target(redirs):
            key = _path_key(path)
            if append and key in self.files:
                old = self.files[key]
                self.files[key] = None if old is None or out is None else old + out
            else:
                self.files[key] = out

    def read(self, path: str) -> str | None:
        key = _path_key(path)
        if key in self.files:
            return self.files[key]
        if unresolved_names(path) or self.read_file is None:
            return None
        text = self.read_file(path)
        if text is None and path not in self.missing:
            self.missing.append(path)
        return text

    def builtin(
        self, fields: list[str], node: _Simple, depth: int, stdin: str | None
    ) -> tuple[_St | None, str | None]:
        """The commands planner follows; (None, None) for one it only records."""
        head = fields[0]
        if head in ("[", "test"):
            args = fields[1:-1] if head == "[" and fields[-1] == "]" else fields[1:]
            return self.test(args, args, double=False), None
        if head in ("true", ":"):
            return _OK, None
        if head == "false":
            return _St(1), None
        if head in ("source", "."):
            self.sourced.extend(display(f) for f in fields[1:2])
            return _OK, None
        if head == "unset":
            for name in fields[1:]:
                if not name.startswith("-"):
                    self.vars.pop(name, None)
                    self.funcs.pop(name, None)
            return _OK, None
        if head == "shift":
            n = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 1
            self.positional = self.positional[n:]
            return _OK, None
        if head == "set":
            if "--" in fields:
                self.positional = fields[fields.index("--") + 1 :]
            return _OK, None
        if head == "exit":
            raise _Exit(fields[1] if len(fields) > 1 else "0")
        if head == "return":
            raise _Return()
        if head == "read":
            for name in fields[1:]:
                if _NAME_RE.fullmatch(name):
                    self.vars.pop(name, None)
            return _OK, None
        if head == "eval":
            return self.run_text(" ".join(fields[1:]), depth + 1), None
        if head in ("cp", "mv") and len(fields) >= 3:
            args = [f for f in fields[1:] if not f.startswith("-")]
            if len(args) == 2:
                self.files[_path_key(args[1])] = self.read(args[0])
            return _OK, None
        if head in self.funcs:
            return self.call(head, fields[1:], depth), None
        nested = self.nested(fields, stdin)
        if nested is not None:
            text, prefix = nested
            try:
                return self.run_text(text, depth + 1, self.prefix + tuple(prefix)), None
            except (_Exit, _Return) as exc:  # the child shell ends, not this one
                return _St(_code(exc)), None
        self.commands.append(Command(node.line, tuple(fields), self.prefix))
        return None, None

    def nested(self, fields: list[str], stdin: str | None):
        """(script text, the words that run it) for `... bash -c TEXT` or `bash <<EOF`."""
        for j, w in enumerate(fields):
            name = posixpath.basename(w)
            if name not in _SHELLS and name != "sbatch":
                continue
            k, saw_c = j + 1, False
            while k < len(fields) and fields[k].startswith("-") and fields[k] != "--":
                if name in _SHELLS and not fields[k].startswith("--") and "c" in fields[k][1:]:
                    saw_c = True
                k += 1
            if saw_c and k < len(fields):
                return fields[k], fields[:j]
            if k == len(fields) and stdin is not None:
                return stdin, fields
            return None
        return None

    def call(self, name: str, args: list[str], depth: int) -> _St:
        if name in self.active:
            return _OK  # recursion: read each function once deep
        self.turn()
        saved = self.positional
        self.positional = args
        self.active.add(name)
        try:
            return self.run_cmd(self.funcs[name], depth + 1)[0]
        except _Return:
            return _OK
        finally:
            self.active.discard(name)
            self.positional = saved

    # tests -------------------------------------------------------------------------------
    def test(self, args: list[str], pats: list[str], *, double: bool) -> _St:
        try:
            result, guess = _TestEval(self, args, pats, double).run()
        except (IndexError, ValueError, TypeError):
            return _St(2)
        return _St(0 if result else 1, tuple(guess))


_ARITH_ASSIGN = re.compile(
    r"(?P<name>[A-Za-z_]\w*)\s*(?:(?P<inc>\+\+|--)|(?P<op>[-+*/%]|<<|>>|[&|^])?=(?!=)\s*(?P<rhs>.*))"
    r"|(?P<preinc>\+\+|--)\s*(?P<pre>[A-Za-z_]\w*)",
    re.S,
)


def _is_test(cmd) -> bool:
    if isinstance(cmd, _ArithCmd):
        return True
    return (
        isinstance(cmd, _Simple) and bool(cmd.words) and _plain(cmd.words[0]) in ("[", "[[", "test")
    )


def _first_line(items: list) -> int:
    if items and isinstance(items[0].first.cmds[0], (_Simple, _ArithCmd)):
        return items[0].first.cmds[0].line
    return 0


def _exits(body: list | None) -> bool:
    """The branch ends the script with an error (`exit 1` at its top level)."""
    for item in body or []:
        for cmd in [item.first] + [p for _, p in item.rest]:
            first = cmd.cmds[0]
            if isinstance(first, _Simple) and first.words and _plain(first.words[0]) == "exit":
                arg = _plain(first.words[1]) if len(first.words) > 1 else "0"
                if arg != "0":
                    return True
    return False

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
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from planner.errors import SpecError

__all__ = ["Command", "Script", "run", "unresolved", "unresolved_names", "only_unresolved",
           "display", "why", "MAX_VALUE", "MAX_ITEMS", "MAX_PRODUCED", "MAX_DEPTH",
           "MAX_ITERATIONS", "BUDGET_S"]

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

_INT64 = 2 ** 63
_MAX_ARITH_NEST = 32          # each level is ~14 Python frames: 32 stay far from the 1000 limit
_MARK = "\x00"
_MARK_RE = re.compile(r"\x00([^\x00]*)\x00")
_CHUNK_RE = re.compile(r"(?:\x00[^\x00]*\x00|[^\s\x00])+")
_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_ASSIGN_RE = re.compile(r"([A-Za-z_]\w*)(\[[^\]]*\])?(\+?)=(.*)", re.DOTALL)
_LIT_RUN = re.compile(r"[^\s;&|<>()'\"\\$`\x00]+")
_META = frozenset(" \t\r\n;&|<>()")
_DB_STOP = frozenset(" \t\r\n;")
_PREFIX_WORDS = frozenset({"time", "exec", "nohup", "command", "builtin", "noglob"})
_START_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{", "}",
                             "time", "fi", "done", "esac", "in"})
_CLOSERS = frozenset({"then", "fi", "done", "esac", "elif", "else", "do", "}", "in"})
_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_SLURM = {"nodes": ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), "N": ("SLURM_NNODES",
          "SLURM_JOB_NUM_NODES"), "ntasks-per-node": ("SLURM_NTASKS_PER_NODE",),
          "gpus-per-node": ("SLURM_GPUS_PER_NODE",), "ntasks": ("SLURM_NTASKS",)}


def unresolved(name: str) -> str:
    """The marker for a value planner cannot know without running something."""
    return f"{_MARK}{name.replace(_MARK, '')}{_MARK}"


def unresolved_names(text: str) -> list[str]:
    """What a value depends on that the script does not set, e.g. ['$NNODES']."""
    return list(dict.fromkeys(_MARK_RE.findall(text)))


def only_unresolved(text: str) -> bool:
    """True if the value is nothing but unresolved parts (e.g. an unset `$EXTRA_ARGS`)."""
    return bool(unresolved_names(text)) and not _MARK_RE.sub("", text).strip()


def display(text: str) -> str:
    """A value as the user would read it: markers shown by name."""
    return _MARK_RE.sub(lambda m: m.group(1), text)


def why(names: list[str]) -> str:
    """'depends on $X, which the script never sets' (and the like), for error messages."""
    sets = [n for n in names if not n.startswith(("$(", "`", "$((", "${"))]
    subs = [n for n in names if n not in sets]
    parts = []
    if sets:
        parts.append(f"{', '.join(sets)}, which the script never sets (and gives no default)")
    if subs:
        parts.append(f"{', '.join(subs)}, which planner does not run or evaluate")
    return "depends on " + "; and on ".join(parts)


def _is_unset_marker(name: str) -> bool:
    """A marker for a variable or positional parameter that is not set (not a substitution)."""
    return bool(re.fullmatch(r"\$(?:[A-Za-z_]\w*|[0-9]+|[@*#])", name))


def _limit(what: str, line: int) -> SpecError:
    where = f"line {line}: " if line else ""
    return SpecError(f"{where}{what}; a launch script never needs that, so planner stops "
                     "reading it; fix the script")


# --------------------------------------------------------------------------- the parsed words

@dataclass
class _Lit:
    text: str
    quoted: bool


@dataclass
class _Var:
    name: str
    op: str | None
    arg: list | None
    quoted: bool
    index: str | None = None
    raw: str = ""


@dataclass
class _Sub:
    text: str
    quoted: bool


@dataclass
class _Arith:
    parts: list
    quoted: bool
    raw: str = ""


@dataclass
class _Array:
    words: list


_Part = Union[_Lit, _Var, _Sub, _Arith, _Array]


@dataclass
class _Redir:
    op: str
    fd: str = ""
    target: list | None = None
    body: list | None = None          # a here-document or here-string, as word parts


@dataclass
class _Tok:
    kind: str                          # word | op | redir | arith
    value: object
    line: int
    start: int = 0
    end: int = 0


class _Lexer:
    """Characters to tokens: words (lists of parts), operators, redirections, `(( ))`."""

    def __init__(self, text: str, depth: int = 0):
        if depth > MAX_DEPTH:
            raise _limit(f"expansions nest deeper than {MAX_DEPTH} levels", 0)
        self.s, self.i, self.n, self.line, self.depth = text, 0, len(text), 1, depth
        self.dbracket = False
        self.pending: list[tuple[_Redir, str, bool, bool]] = []

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def _skip_comment(self) -> None:
        j = self.s.find("\n", self.i)
        self.i = self.n if j < 0 else j

    # tokens ------------------------------------------------------------------------------
    def tokens(self) -> list[_Tok]:
        out: list[_Tok] = []
        at_start = True
        while self.i < self.n:
            c = self.s[self.i]
            start = self.i
            if c == "\\" and self.peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif c in " \t\r":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            elif c == "\n":
                out.append(_Tok("op", "\n", self.line, start, start + 1))
                self.i += 1
                self.line += 1
                self._heredocs()
                at_start = True
            elif c in "<>" and self.peek(1) == "(" and not self.dbracket:
                self.i += 1
                text = self._balanced(1, "(", ")")
                out.append(_Tok("word", [_Sub(c + "(" + text + ")", False)], self.line, start,
                                self.i))
                at_start = False
            elif (c in "<>" or (c == "&" and self.peek(1) == ">")) and not self.dbracket:
                out.append(_Tok("redir", self._redirect(out), self.line, start, self.i))
            elif c in ";&|" and not self.dbracket:
                op = next(o for o in (";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|")
                          if self.s.startswith(o, self.i))
                self.i += len(op)
                out.append(_Tok("op", op, self.line, start, self.i))
                at_start = True
            elif c == "(" and at_start and self.peek(1) == "(" and not self.dbracket:
                text = self._balanced(2, "(", ")")
                if self.peek() == ")":
                    self.i += 1
                out.append(_Tok("arith", text, self.line, start, self.i))
                at_start = False
            elif c in "()" and not self.dbracket:
                self.i += 1
                out.append(_Tok("op", c, self.line, start, self.i))
                at_start = True
            else:
                if at_start and self.s.startswith("[[", self.i) and self.peek(2) in " \t\n":
                    self.dbracket = True
                line = self.line
                word = self.word(_DB_STOP if self.dbracket else _META)
                if self.i == start:            # a stop character we do not handle: skip it
                    self.i += 1
                    continue
                lit = _plain(word)
                if self.dbracket and lit == "]]":
                    self.dbracket = False
                out.append(_Tok("word", word, line, start, self.i))
                at_start = lit in _START_KEYWORDS
        self._heredocs()
        return out

    def _redirect(self, out: list[_Tok]) -> _Redir:
        fd = ""
        if out and out[-1].kind == "word" and out[-1].end == self.i:
            lit = _plain(out[-1].value)
            if lit is not None and lit.isdigit():
                fd = lit
                out.pop()
        op = next(o for o in ("&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">&", ">>", ">|", "<",
                              ">") if self.s.startswith(o, self.i))
        self.i += len(op)
        while self.peek() in (" ", "\t"):
            self.i += 1
        red = _Redir(op, fd)
        if op in ("<<", "<<-"):
            word = self.word(_META)
            delim = "".join(p.text for p in word if isinstance(p, _Lit))
            quoted = any(getattr(p, "quoted", False) for p in word)
            self.pending.append((red, delim, op == "<<-", quoted))
        elif op == "<<<":
            red.body = self.word(_META) + [_Lit("\n", True)]
        elif self.peek() and self.peek() not in _META:
            red.target = self.word(_META)
        return red

    def _heredocs(self) -> None:
        """Read the bodies of the here-documents whose line just ended."""
        for red, delim, strip, quoted in self.pending:
            lines = []
            while self.i < self.n:
                j = self.s.find("\n", self.i)
                end = self.n if j < 0 else j
                text = self.s[self.i:end]
                self.i = end + 1 if j >= 0 else self.n
                self.line += 1
                if (text.lstrip("\t") if strip else text) == delim:
                    break
                lines.append(text.lstrip("\t") if strip else text)
            body = "".join(line + "\n" for line in lines)
            red.body = [_Lit(body, True)] if quoted else _Lexer(body, self.depth + 1).heredoc()
        self.pending = []

    # words -------------------------------------------------------------------------------
    def word(self, stop: frozenset = _META) -> list[_Part]:
        parts: list[_Part] = []
        lit: list[str] = []

        def push() -> None:
            if lit:
                parts.append(_Lit("".join(lit), False))
                lit.clear()

        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\":
                nxt = self.peek(1)
                if nxt == "\n":
                    self.line += 1
                elif nxt:
                    push()
                    parts.append(_Lit(nxt, True))
                self.i += 2
            elif c == "(" and not parts and re.fullmatch(r"[A-Za-z_]\w*\+?=", "".join(lit)):
                push()
                self.i += 1
                parts.append(self._array())
            elif c in stop:
                break
            elif c == _MARK:
                lit.append(self._marker())
            elif c == "'":
                push()
                j = self.s.find("'", self.i + 1)
                j = self.n if j < 0 else j
                text = self.s[self.i + 1:j]
                self.line += text.count("\n")
                parts.append(_Lit(text, True))
                self.i = j + 1
            elif c == '"':
                push()
                parts.extend(self._dquote())
            elif c == "$":
                push()
                parts.append(self._dollar(quoted=False))
            elif c == "`":
                push()
                parts.append(self._backtick(quoted=False))
            else:
                m = _LIT_RUN.match(self.s, self.i)
                if m:
                    lit.append(m.group())
                    self.i = m.end()
                else:
                    if c == "\n":
                        self.line += 1
                    lit.append(c)
                    self.i += 1
        push()
        return parts

    def heredoc(self) -> list[_Part]:
        """A here-document body: expansions as in double quotes, `"` is literal."""
        return self._dquote(closing=False)

    def _dquote(self, closing: bool = True) -> list[_Part]:
        if closing:
            self.i += 1
        parts: list[_Part] = []
        lit: list[str] = []

        def push() -> None:
            if lit:
                parts.append(_Lit("".join(lit), True))
                lit.clear()

        escapes = ('$', '`', '"', '\\', '\n') if closing else ('$', '`', '\\', '\n')
        while self.i < self.n:
            c = self.s[self.i]
            if c == '"' and closing:
                self.i += 1
                break
            if c == "\\" and self.peek(1) in escapes:
                if self.peek(1) == "\n":
                    self.line += 1
                else:
                    lit.append(self.peek(1))
                self.i += 2
            elif c == "$":
                push()
                parts.append(self._dollar(quoted=True))
            elif c == "`":
                push()
                parts.append(self._backtick(quoted=True))
            elif c == _MARK:
                lit.append(self._marker())
            else:
                j = self.i
                while j < self.n and self.s[j] not in '"\\$`\n\x00':
                    j += 1
                if j == self.i:
                    if c == "\n":
                        self.line += 1
                    j += 1
                lit.append(self.s[self.i:j])
                self.i = j
        push()
        return parts or [_Lit("", True)]

    def _marker(self) -> str:
        """An unresolved marker in text read again (bash -c, eval): kept whole, unexpanded."""
        j = self.s.find(_MARK, self.i + 1)
        j = self.n - 1 if j < 0 else j
        text = self.s[self.i:j + 1]
        self.i = j + 1
        return text

    def _balanced(self, skip: int, open_: str, close: str) -> str:
        """The text up to the matching `close` (quotes respected); self.i moves past it."""
        self.i += skip
        depth, start = 1, self.i
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "'" and open_ != "{":
                j = self.s.find("'", self.i + 1)
                self.i = self.n if j < 0 else j + 1
                continue
            if c == "\n":
                self.line += 1
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return self.s[start:self.i - 1]
            self.i += 1
        return self.s[start:self.i]

    def _dollar(self, *, quoted: bool) -> _Part:
        nxt = self.peek(1)
        if nxt == "{":
            return _brace(self._balanced(2, "{", "}"), quoted, self.depth + 1)
        if nxt == "(" and self.peek(2) == "(":
            inner = self._balanced(3, "(", ")")     # up to the first of the closing pair
            if self.peek() == ")":
                self.i += 1
            return _Arith(_Lexer(inner, self.depth + 1).word(stop=frozenset()), quoted,
                          raw=f"$(({inner}))")
        if nxt == "(":
            return _Sub("$(" + self._balanced(2, "(", ")") + ")", quoted)
        m = re.match(r"[A-Za-z_]\w*|[0-9]|[@*#?$!-]", self.s[self.i + 1:self.i + 200])
        if m:
            self.i += 1 + len(m.group())
            return _Var(m.group(), None, None, quoted, raw="$" + m.group())
        self.i += 1
        return _Lit("$", quoted)

    def _backtick(self, *, quoted: bool) -> _Sub:
        j = self.s.find("`", self.i + 1)
        j = self.n if j < 0 else j
        text = self.s[self.i:j + 1]
        self.line += text.count("\n")
        self.i = j + 1
        return _Sub(text, quoted)

    def _array(self) -> _Array:
        words = []
        while self.i < self.n:
            c = self.s[self.i]
            if c == ")":
                self.i += 1
                break
            if c in " \t\r":
                self.i += 1
            elif c == "\n":
                self.line += 1
                self.i += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif c == "#":
                self._skip_comment()
            else:
                before = self.i
                w = self.word()
                if w:
                    words.append(w)
                if self.i == before:
                    self.i += 1
        return _Array(words)


def _brace(content: str, quoted: bool, depth: int) -> _Part:
    """`${...}`: name, optional [index], optional operator and word."""
    raw = "${" + content + "}"
    m = re.match(r"([A-Za-z_]\w*|[0-9]+|[@*#?$!-])(\[([^\]]*)\])?", content)
    if not m or content.startswith("#") and len(content) > 1 or content.startswith("!"):
        return _Var(content, "unsupported", None, quoted, raw=raw)
    name, index, rest = m.group(1), m.group(3), content[m.end():]
    if not rest:
        return _Var(name, None, None, quoted, index, raw)
    op = re.match(r":?[-=+?]", rest)
    if not op:
        return _Var(name, "unsupported", None, quoted, index, raw)
    arg = _Lexer(rest[op.end():], depth).word(stop=frozenset())
    return _Var(name, op.group(), arg, quoted, index, raw)


def _plain(word: list[_Part]) -> str | None:
    if len(word) == 1 and isinstance(word[0], _Lit) and not word[0].quoted:
        return word[0].text
    return None


# --------------------------------------------------------------------------------- the parse

@dataclass
class _Simple:
    line: int
    words: list
    redirs: list
    text: str = ""


@dataclass
class _Pipe:
    cmds: list
    negate: bool = False


@dataclass
class _AndOr:
    first: _Pipe
    rest: list


@dataclass
class _If:
    line: int
    branches: list                     # [(condition list, body list, condition text)]
    orelse: list | None


@dataclass
class _Loop:
    line: int
    kind: str                          # for | while | until
    var: str | None
    items: list | None
    cond: list | None
    body: list


@dataclass
class _Case:
    line: int
    subject: list
    arms: list                         # [(patterns, body)]
    text: str = ""


@dataclass
class _Group:
    body: list
    subshell: bool


@dataclass
class _Func:
    name: str
    body: object


@dataclass
class _ArithCmd:
    line: int
    text: str


class _Parser:
    """Tokens to a tree; what bash would call a syntax error is recorded, not raised."""

    def __init__(self, toks: list[_Tok], source: str, depth: int):
        self.t, self.k, self.src, self.depth = toks, 0, source, depth
        self.problems: list[str] = []

    def peek(self, k: int = 0) -> _Tok | None:
        j = self.k + k
        return self.t[j] if j < len(self.t) else None

    def kw(self, k: int = 0) -> str | None:
        tok = self.peek(k)
        return _plain(tok.value) if tok is not None and tok.kind == "word" else None

    def op(self, k: int = 0) -> str | None:
        tok = self.peek(k)
        return tok.value if tok is not None and tok.kind == "op" else None

    def advance(self) -> _Tok:
        tok = self.t[self.k]
        self.k += 1
        return tok

    def expect(self, word: str, line: int) -> None:
        if self.kw() == word:
            self.advance()
        else:
            self.problems.append(f"line {line}: `{word}` is missing (bash rejects the script "
                                 "there)")

    def newlines(self) -> None:
        while self.op() == "\n":
            self.advance()

    def parse_list(self, stops: frozenset = frozenset(), stop_ops: frozenset = frozenset()):
        items = []
        while True:
            while self.op() in ("\n", ";", "&"):
                self.advance()
            tok = self.peek()
            if tok is None or (tok.kind == "op" and tok.value in stop_ops) \
                    or self.kw() in stops:
                return items
            if tok.kind == "op" and tok.value != "(":
                self.problems.append(f"line {tok.line}: unexpected `{tok.value}`")
                self.advance()
                continue
            if self.kw() in _CLOSERS:
                self.problems.append(f"line {tok.line}: unexpected `{self.kw()}`")
                self.advance()
                continue
            items.append(self.and_or())

    def and_or(self) -> _AndOr:
        first, rest = self.pipeline(), []
        while self.op() in ("&&", "||"):
            op = self.advance().value
            self.newlines()
            rest.append((op, self.pipeline()))
        return _AndOr(first, rest)

    def pipeline(self) -> _Pipe:
        negate = False
        while self.kw() in ("!", "time"):
            negate ^= self.advance().value[0].text == "!"
        cmds = [self.command()]
        while self.op() in ("|", "|&"):
            self.advance()
            self.newlines()
            cmds.append(self.command())
        return _Pipe(cmds, negate)

    def command(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            tok = self.peek()
            raise _limit(f"compound commands nest deeper than {MAX_DEPTH} levels",
                         tok.line if tok else 0)
        try:
            node = self._command()
            while self.peek() is not None and self.peek().kind == "redir":
                self.advance()                 # `done < file`, `} > log`: nothing to read
            return node
        finally:
            self.depth -= 1

    def _command(self):
        tok, kw = self.peek(), self.kw()
        if tok is None:
            return _Simple(0, [], [])
        if kw == "if":
            return self._if()
        if kw in ("while", "until"):
            line = self.advance().line
            cond = self.parse_list(frozenset({"do"}))
            self.expect("do", line)
            body = self.parse_list(frozenset({"done"}))
            self.expect("done", line)
            return _Loop(line, kw, None, None, cond, body)
        if kw == "for":
            return self._for()
        if kw == "case":
            return self._case()
        if kw == "{":
            line = self.advance().line
            body = self.parse_list(frozenset({"}"}))
            self.expect("}", line)
            return _Group(body, False)
        if kw == "function":
            self.advance()
            name = self.kw() or ""
            if self.peek() is not None:
                self.advance()
            if self.op() == "(" and self.op(1) == ")":
                self.k += 2
            self.newlines()
            return _Func(name, self.command())
        if tok.kind == "op" and tok.value == "(":
            line = self.advance().line
            body = self.parse_list(stop_ops=frozenset({")"}))
            if self.op() == ")":
                self.advance()
            else:
                self.problems.append(f"line {line}: `)` is missing")
            return _Group(body, True)
        if tok.kind == "arith":
            self.advance()
            return _ArithCmd(tok.line, tok.value)
        if kw is not None and _NAME_RE.fullmatch(kw) and self.op(1) == "(" and self.op(2) == ")":
            self.k += 3
            self.newlines()
            return _Func(kw, self.command())
        return self._simple()

    def _simple(self) -> _Simple:
        words, redirs = [], []
        first = self.peek()
        last = first
        while self.peek() is not None and self.peek().kind in ("word", "redir"):
            last = self.advance()
            (words if last.kind == "word" else redirs).append(last.value)
        if first is None:
            return _Simple(0, [], [])
        return _Simple(first.line, words, redirs, self.src[first.start:last.end])

    def _if(self) -> _If:
        line = self.advance().line
        branches = []
        kw = "if"
        while kw in ("if", "elif"):
            start = self.peek()
            cond = self.parse_list(frozenset({"then"}))
            end = self.t[self.k - 1] if self.k else start
            text = self.src[start.start:end.end].strip(" \t\n;") if start is not None else ""
            self.expect("then", line)
            body = self.parse_list(frozenset({"elif", "else", "fi"}))
            branches.append((cond, body, text))
            kw = self.kw()
            if kw == "elif":
                self.advance()
        orelse = None
        if self.kw() == "else":
            self.advance()
            orelse = self.parse_list(frozenset({"fi"}))
        self.expect("fi", line)
        return _If(line, branches, orelse)

    def _for(self) -> _Loop:
        line = self.advance().line
        if self.peek() is not None and self.peek().kind == "arith":      # for (( ; ; ))
            self.advance()
            var, items = None, []
        else:
            var = self.kw() if self.peek() is not None else None
            if self.peek() is not None:
                self.advance()
            self.newlines()
            items = None
            if self.kw() == "in":
                self.advance()
                items = []
                while self.peek() is not None and self.peek().kind == "word":
                    items.append(self.advance().value)
        while self.op() in ("\n", ";"):
            self.advance()
        self.expect("do", line)
        body = self.parse_list(frozenset({"done"}))
        self.expect("done", line)
        return _Loop(line, "for", var, items, None, body)

    def _case(self) -> _Case:
        tok = self.advance()
        subject = self.advance().value if self.peek() is not None and \
            self.peek().kind == "word" else []
        text = self.src[tok.start:self.t[self.k - 1].end]
        self.newlines()
        self.expect("in", tok.line)
        arms = []
        while True:
            self.newlines()
            if self.peek() is None:
                self.problems.append(f"line {tok.line}: `esac` is missing")
                break
            if self.kw() == "esac":
                self.advance()
                break
            if self.op() == "(":
                self.advance()
            patterns = []
            while self.peek() is not None and self.peek().kind == "word":
                patterns.append(self.advance().value)
                if self.op() == "|":
                    self.advance()
            if self.op() == ")":
                self.advance()
            else:
                self.problems.append(f"line {tok.line}: a `case` pattern lacks its `)`")
                break
            body = self.parse_list(frozenset({"esac"}), frozenset({";;", ";&", ";;&"}))
            if self.op() in (";;", ";&", ";;&"):
                self.advance()
            arms.append((patterns, body))
        return _Case(tok.line, subject, arms, text)


def _parse(text: str, depth: int) -> tuple[list, list[str]]:
    parser = _Parser(_Lexer(text, depth).tokens(), text, depth)
    tree = parser.parse_list()
    return tree, parser.problems


# --------------------------------------------------------------------------------- arithmetic

_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)|([A-Za-z_]\w*)|"
                          r"(\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>&|^!~?:()]))")
_BINARY = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="),
           ("<<", ">>"), ("+", "-"), ("*", "/", "%")]


class _ArithError(Exception):
    """The expression is not one planner evaluates (the value comes out unresolved)."""


class _Arith64:
    """Bash arithmetic on 64-bit integers: a value outside them is a limit error, not a wrap."""

    def __init__(self, text: str, lookup: Callable[[str], Optional[str]], line: int,
                 depth: int = 0):
        self.toks = []
        pos = 0
        while pos < len(text):
            m = _ARITH_TOKEN.match(text, pos)
            if not m:
                if text[pos:].strip():
                    raise _ArithError(text)
                break
            self.toks.append(m.group(1) and ("num", m.group(1)) or m.group(2) and
                             ("name", m.group(2)) or ("op", m.group(3)))
            pos = m.end()
        self.k, self.lookup, self.line, self.depth, self.raw = 0, lookup, line, depth, text

    def value(self) -> int:
        if not self.toks:
            return 0
        v = self._ternary(0)
        if self.k != len(self.toks):
            raise _ArithError(self.raw)
        return v

    def _peek(self):
        return self.toks[self.k] if self.k < len(self.toks) else (None, None)

    def _check(self, v: int) -> int:
        if not -_INT64 <= v < _INT64:
            raise _limit(f"$(({self.raw.strip()[:60]})) overflows the 64-bit integers bash "
                         "computes with", self.line)
        return v

    def _nest(self, level: int) -> None:
        if level + self.depth > _MAX_ARITH_NEST:
            raise _limit(f"arithmetic nests deeper than {_MAX_ARITH_NEST} levels", self.line)

    def _ternary(self, level: int) -> int:
        self._nest(level)
        cond = self._binary(0, level)
        if self._peek() == ("op", "?"):
            self.k += 1
            a = self._ternary(level + 1)
            if self._peek() != ("op", ":"):
                raise _ArithError(self.raw)
            self.k += 1
            b = self._ternary(level + 1)
            return a if cond else b
        return cond

    def _binary(self, prec: int, level: int) -> int:
        if prec == len(_BINARY):
            return self._power(level)
        left = self._binary(prec + 1, level)
        while self._peek()[0] == "op" and self._peek()[1] in _BINARY[prec]:
            op = self._peek()[1]
            self.k += 1
            right = self._binary(prec + 1, level)
            left = self._check(_apply(op, left, right, self.raw))
        return left

    def _power(self, level: int) -> int:
        base = self._unary(level)
        if self._peek() == ("op", "**"):
            self.k += 1
            exp = self._power(level + 1)                  # right-associative
            if exp < 0:
                raise _ArithError(self.raw)
            if abs(base) > 1 and exp > 64:
                raise _limit(f"$(({self.raw.strip()[:60]})) overflows the 64-bit integers bash "
                             "computes with", self.line)
            return self._check(base ** exp)
        return base

    def _unary(self, level: int) -> int:
        self._nest(level)
        kind, tok = self._peek()
        if kind == "op" and tok in ("-", "+", "!", "~"):
            self.k += 1
            v = self._unary(level + 1)
            return self._check({"-": -v, "+": v, "!": int(not v), "~": ~v}[tok])
        if kind == "op" and tok == "(":
            self.k += 1
            v = self._ternary(level + 1)
            if self._peek() != ("op", ")"):
                raise _ArithError(self.raw)
            self.k += 1
            return v
        if kind == "num":
            self.k += 1
            return self._check(_number(tok, self.raw))
        if kind == "name":
            self.k += 1
            text = self.lookup(tok)
            if text is None:
                raise _ArithError(tok)
            text = text.strip() or "0"
            if re.fullmatch(r"-?\d+", text):
                return self._check(int(text))
            return _Arith64(text, self.lookup, self.line, self.depth + 1 + level).value()
        raise _ArithError(self.raw)


def _number(tok: str, raw: str) -> int:
    try:
        if "#" in tok:
            base, digits = tok.split("#", 1)
            return int(digits, int(base))
        if tok.lower().startswith("0x"):
            return int(tok, 16)
        if len(tok) > 1 and tok.startswith("0"):
            return int(tok, 8)
        if len(tok) > 20:
            return _INT64                              # _check names the overflow
        return int(tok)
    except ValueError:
        raise _ArithError(raw) from None


def _apply(op: str, a: int, b: int, raw: str) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise _ArithError(raw)                      # bash: division by 0
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)   # C truncation
        return q if op == "/" else a - q * b
    if op in ("<<", ">>"):
        if not 0 <= b < 64:
            raise _ArithError(raw)
        return a << b if op == "<<" else a >> b
    return {"+": a + b, "-": a - b, "*": a * b, "<": int(a < b), ">": int(a > b),
            "<=": int(a <= b), ">=": int(a >= b), "==": int(a == b), "!=": int(a != b),
            "&&": int(bool(a and b)), "||": int(bool(a or b)), "&": a & b, "|": a | b,
            "^": a ^ b}[op]


# --------------------------------------------------------------------------------- expansion

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
    variables: dict[str, Union[str, list[str]]]
    sourced: list[str] = field(default_factory=list)
    files: dict[str, Optional[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    unused_env: list[str] = field(default_factory=list)

    def var(self, name: str) -> str | None:
        value = self.variables.get(name)
        if isinstance(value, list):
            return value[0] if value else ""
        return value

    def file(self, name: str) -> tuple[bool, Optional[str]]:
        """(the script writes it, its text if planner could follow how)."""
        key = _path_key(name)
        return (key in self.files, self.files.get(key))


def _path_key(name: str) -> str:
    return posixpath.normpath(name) if name else name


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
        self.vars: dict[str, Union[str, list[str]]] = {}
        self.positional: list[str] = []
        self.funcs: dict[str, object] = {}
        self.files: dict[str, Optional[str]] = {}
        self.commands: list[Command] = []
        self.sourced: list[str] = []
        self.notes: list[str] = []
        self.problems: list[str] = []
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
            raise _limit(f"reading took more than {self.budget_s:g} s (planner's budget for one "
                         "file)", self.line)

    def turn(self) -> None:
        self.turns += 1
        if self.turns > MAX_ITERATIONS:
            raise _limit(f"more than {MAX_ITERATIONS:,} loop turns and function calls",
                         self.line)

    def count(self, n: int) -> None:
        if n > MAX_VALUE:
            raise _limit(f"a value grows past {MAX_VALUE:,} characters", self.line)
        self.produced += n
        if self.produced > MAX_PRODUCED:
            raise _limit(f"the script expands to more than {MAX_PRODUCED:,} characters",
                         self.line)

    def note_read(self, name: str) -> None:
        if name in self.env_names and name not in self.env_overwritten:
            self.env_read.add(name)

    def set_var(self, name: str, value: Union[str, list[str]]) -> None:
        if isinstance(value, list):
            if len(value) > MAX_ITEMS:
                raise _limit(f"array {name} grows past {MAX_ITEMS:,} elements", self.line)
        elif len(value) > MAX_VALUE:
            raise _limit(f"variable {name} grows past {MAX_VALUE:,} characters", self.line)
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
    def _value(self, v: _Var) -> Union[str, list[str]]:
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

        def lookup(name: str) -> Optional[str]:
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
            if total > MAX_VALUE:
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
            if total > MAX_VALUE and not isinstance(value, list):
                self.count(total)
            if isinstance(value, list):          # "${ARR[@]}": one field per element
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
        if self.produced > MAX_PRODUCED:
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
            if not 0 <= k < MAX_ITEMS:
                raise _limit(f"array {name} grows past {MAX_ITEMS:,} elements", self.line)
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
        if depth > MAX_DEPTH:
            raise _limit(f"bash -c / eval nest deeper than {MAX_DEPTH} levels", self.line)
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
                self.note(first.line, first.text, st, ("ran" if go else "skipped") +
                          f" what follows `{op}`")
            if go:
                nxt = self.run_pipe(pipe, depth)
                st = _St(nxt.code, nxt.guess)
        return st

    def run_pipe(self, pipe: _Pipe, depth: int) -> _St:
        data: Optional[str] = None
        st = _OK
        for k, cmd in enumerate(pipe.cmds):
            st, data = self.run_cmd(cmd, depth, stdin=data if k else None,
                                    piped=k + 1 < len(pipe.cmds))
        if pipe.negate:
            st = _St(0 if st.code else 1, st.guess)
        return st

    def run_cmd(self, node, depth: int, stdin: Optional[str] = None,
                piped: bool = False) -> tuple[_St, Optional[str]]:
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
            value = self._arith(_Arith(_Lexer(node.text, depth + 1).word(stop=frozenset()),
                                       False, raw=f"(({node.text}))"))
            if unresolved_names(value):
                return _St(1, (f"{display(value)} is not known",)), None
            return _St(0 if int(value) else 1), None
        return _OK, None

    # control flow ------------------------------------------------------------------------
    def note(self, line: int, text: str, st: _St, taken: str) -> None:
        text = " ".join((text or "a condition").split())
        text = text if len(text) <= 60 else text[:57] + "..."
        self.notes.append(f"line {line}: `{text}` ({'; '.join(dict.fromkeys(st.guess))}): "
                          f"{taken}")

    def run_if(self, node: _If, depth: int) -> _St:
        for k, (cond, body, text) in enumerate(node.branches):
            st = self.run_list(cond, depth)
            take = st.code == 0
            if st.guess:
                rest = node.branches[k + 1:]
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
            return self.run_list(node.body, depth)        # read once
        items = (list(self.positional) if node.items is None
                 else [f for w in node.items for f in self.expand(w)])
        st = _OK
        for item in items or [None]:
            self.turn()
            if node.var and item is not None:
                self.set_var(node.var, item)
            st = self.run_list(node.body, depth)
        return st

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
                    self.note(node.line, node.text, _St(0, tuple(guess)),
                              f"took the `{'|'.join(display(p) for p in pats)})` arm")
                return self.run_list(body, depth)
        return _OK

    # simple commands ---------------------------------------------------------------------
    def run_simple(self, node: _Simple, depth: int, stdin: Optional[str],
                   piped: bool) -> tuple[_St, Optional[str]]:
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
            return self.test(fields[1:-1] if fields[-1] == "]]" else fields[1:], pats[1:],
                             double=True), None
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
            raise _Exit("0")                         # exec replaces the shell: nothing after runs
        if st is not None:
            return st, out
        out = _stdout(fields, stdin, self) if (piped or self.stdout_target(node.redirs)) \
            else None
        self.write(node.redirs, out)
        return _OK, out

    def stdin(self, redirs: list[_Redir], stdin: Optional[str]) -> Optional[str]:
        for red in redirs:
            if red.body is not None:
                stdin = self.join(red.body)
            elif red.op == "<" and red.target is not None:
                stdin = self.read(self.join(red.target))
        return stdin

    def stdout_target(self, redirs: list[_Redir]) -> list[tuple[str, bool]]:
        out = []
        for red in redirs:
            if red.op in (">", ">>", ">|", "&>", "&>>") and red.fd in ("", "1") \
                    and red.target is not None:
                path = self.join(red.target)
                if path not in ("/dev/null", "/dev/stdout", "/dev/stderr"):
                    out.append((path, red.op.endswith(">>")))
        return out

    def write(self, redirs: list[_Redir], out: Optional[str]) -> None:
        for path, append in self.stdout_target(redirs):
            key = _path_key(path)
            if append and key in self.files:
                old = self.files[key]
                self.files[key] = None if old is None or out is None else old + out
            else:
                self.files[key] = out

    def read(self, path: str) -> Optional[str]:
        key = _path_key(path)
        if key in self.files:
            return self.files[key]
        if unresolved_names(path) or self.read_file is None:
            return None
        return self.read_file(path)

    def builtin(self, fields: list[str], node: _Simple, depth: int,
                stdin: Optional[str]) -> tuple[Optional[_St], Optional[str]]:
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
                self.positional = fields[fields.index("--") + 1:]
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
            except (_Exit, _Return) as exc:           # the child shell ends, not this one
                return _St(_code(exc)), None
        self.commands.append(Command(node.line, tuple(fields), self.prefix))
        return None, None

    def nested(self, fields: list[str], stdin: Optional[str]):
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
            return _OK                               # recursion: read each function once deep
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


def _is_test(cmd) -> bool:
    if isinstance(cmd, _ArithCmd):
        return True
    return isinstance(cmd, _Simple) and bool(cmd.words) and _plain(cmd.words[0]) in (
        "[", "[[", "test")


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


def _plain_value(text: str) -> tuple[Optional[str], list[str]]:
    """A test operand for the plain run: unset variables are empty (a guess, named); None
    when it depends on something planner does not run."""
    guess, unknown = [], False

    def sub(m: re.Match) -> str:
        nonlocal unknown
        name = m.group(1)
        if _is_unset_marker(name):
            guess.append(f"{name} is not set")
        else:
            unknown = True
            guess.append(f"{name[:40]} is not run")
        return ""

    value = _MARK_RE.sub(sub, text)
    return (None if unknown else value), guess


_FILE_TESTS = frozenset("-e -f -d -r -w -x -s -L -h -p -S -b -c -O -G -N -g -u -k".split())
_NUMERIC = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
            "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


class _TestEval:
    """`[ ]` / `test` / `[[ ]]` over expanded operands, for the plain run."""

    def __init__(self, sh: _Shell, args: list[str], pats: list[str], double: bool):
        self.sh, self.a, self.p, self.k, self.double = sh, args, pats, 0, double
        self.guess: list[str] = []

    def run(self) -> tuple[bool, list[str]]:
        if not self.a:
            return False, []
        result = self.or_()
        if self.k != len(self.a):
            raise ValueError("trailing operands")
        return result, self.guess

    def more(self) -> bool:
        return self.k < len(self.a)

    def tok(self, k: int = 0) -> Optional[str]:
        j = self.k + k
        return self.a[j] if j < len(self.a) else None

    def or_(self) -> bool:
        left = self.and_()
        while self.tok() in (("||",) if self.double else ("-o",)):
            self.k += 1
            right = self.and_()
            left = left or right
        return left

    def and_(self) -> bool:
        left = self.not_()
        while self.tok() in (("&&",) if self.double else ("-a",)):
            self.k += 1
            right = self.not_()
            left = left and right
        return left

    def not_(self) -> bool:
        if self.tok() == "!" and self.tok(1) is not None:
            self.k += 1
            return not self.not_()
        return self.primary()

    def value(self, text: str) -> Optional[str]:
        value, guess = _plain_value(text)
        self.guess += guess
        return value

    def primary(self) -> bool:
        t = self.tok()
        if t is None:
            raise IndexError("missing operand")
        if t == "(":
            self.k += 1
            v = self.or_()
            if self.tok() == ")":
                self.k += 1
            return v
        op1 = self.tok(1)
        if op1 in ("=", "==", "!=", "<", ">", "=~") or op1 in _NUMERIC or op1 in ("-nt", "-ot",
                                                                                  "-ef"):
            left, right, pat = self.a[self.k], self.a[self.k + 2], self.p[self.k + 2]
            self.k += 3
            return self.binary(left, op1, right, pat)
        if t in ("-z", "-n", "-v") or t in _FILE_TESTS or t == "-t":
            arg = self.a[self.k + 1]
            self.k += 2
            return self.unary(t, arg)
        self.k += 1
        v = self.value(t)
        return True if v is None else v != ""

    def unary(self, op: str, arg: str) -> bool:
        if op == "-v":
            return arg in self.sh.vars or arg in self.sh.env_names
        if op in ("-z", "-n"):
            v = self.value(arg)
            if v is None:
                return op == "-n"                  # a command prints something
            return (v == "") == (op == "-z")
        if op == "-t":
            self.guess.append("stdin is not a terminal")
            return False
        path = display(arg)
        if _path_key(arg) in self.sh.files:
            return op not in ("-d",)
        self.guess.append(f"{path[:40]} exists")
        return True

    def binary(self, left: str, op: str, right: str, pat: str) -> bool:
        a, b = self.value(left), self.value(right)
        if op in ("-nt", "-ot", "-ef"):
            self.guess.append(f"{display(left)[:40]} {op} {display(right)[:40]}")
            return False
        if a is None or b is None:
            return op == "!="
        if op in _NUMERIC:
            return _NUMERIC[op](_int(a, self.double), _int(b, self.double))
        if op == "=~":
            try:
                return re.search(b, a) is not None
            except re.error:
                self.guess.append(f"=~ {b[:40]} is not a regular expression planner reads")
                return False
        if op in ("<", ">"):
            return a < b if op == "<" else a > b
        if self.double:
            plain, _ = _plain_value(pat)
            hit = fnmatch.fnmatchcase(a, plain if plain is not None else b)
        else:
            hit = a == b
        return hit if op in ("=", "==") else not hit


def _int(text: str, double: bool) -> int:
    text = text.strip()
    if double and not text:
        return 0
    return int(text)


# --------------------------------------------------------------------------------- output

def _stdout(fields: list[str], stdin: Optional[str], sh: _Shell) -> Optional[str]:
    """What a command prints, for the ones that write config files: cat, echo, printf, sed,
    envsubst, tee; None for anything else (not run)."""
    head, args = posixpath.basename(fields[0]), fields[1:]
    if head == "cat":
        names = [a for a in args if not a.startswith("-") or a == "-"]
        if not names:
            return stdin
        parts = [stdin if n == "-" else sh.read(n) for n in names]
        return None if any(p is None for p in parts) else "".join(parts)
    if head == "echo":
        newline, escapes = True, False
        while args and re.fullmatch(r"-[neE]+", args[0]):
            newline = newline and "n" not in args[0]
            escapes = "e" in args[0]
            args = args[1:]
        text = " ".join(args)
        if escapes:
            text = text.replace("\\n", "\n").replace("\\t", "\t")
        return text + ("\n" if newline else "")
    if head == "printf" and args:
        fmt = args[0].replace("\\n", "\n").replace("\\t", "\t").replace("%%", "\x01")
        rest, n = args[1:], args[0].count("%s")
        if re.search(r"%[^s]", fmt):
            return None
        if not rest or not n:
            return fmt.replace("%s", "").replace("\x01", "%")
        chunks = [rest[i:i + n] for i in range(0, len(rest), n)]
        return "".join(fmt % tuple(c + [""] * (n - len(c))) for c in chunks).replace("\x01", "%")
    if head == "sed":
        return _sed(args, stdin, sh)
    if head == "envsubst":
        if stdin is None:
            return None
        return re.sub(r"\$\{?([A-Za-z_]\w*)\}?",
                      lambda m: sh.vars.get(m.group(1), "") if isinstance(
                          sh.vars.get(m.group(1), ""), str) else "", stdin)
    if head == "tee":
        for name in (a for a in args if not a.startswith("-")):
            sh.files[_path_key(name)] = stdin
        return stdin
    return None


def _sed(args: list[str], stdin: Optional[str], sh: _Shell) -> Optional[str]:
    """`sed [-i] [-E] -e 's/a/b/g' ... [FILE]`: the s commands a template fill-in uses."""
    exprs, files, in_place, ere = [], [], False, False
    k = 0
    while k < len(args):
        a = args[k]
        if a in ("-e", "--expression") and k + 1 < len(args):
            exprs.append(args[k + 1])
            k += 2
            continue
        if a.startswith("-i") or a == "--in-place":
            in_place = True
        elif a in ("-E", "-r", "--regexp-extended"):
            ere = True
        elif a.startswith("-") and a != "-":
            return None                            # -n, -f script, ...: not followed
        elif not exprs:
            exprs.append(a)
        else:
            files.append(a)
        k += 1
    commands = []
    for expr in exprs:
        parsed = _sed_script(expr, ere)
        if parsed is None:
            return None
        commands += parsed
    sources = [sh.read(f) for f in files] if files else [stdin]
    if any(s is None for s in sources):
        return None
    outs = []
    for text in sources:
        for rx, repl, count in commands:
            text = rx.sub(repl, text, count=count)
        outs.append(text)
    if in_place:
        for name, text in zip(files, outs):
            sh.files[_path_key(name)] = text
        return ""
    return "".join(outs)


def _sed_script(expr: str, ere: bool):
    """[(regex, replacement, count)] for `s/a/b/[g]` commands separated by `;`, else None."""
    out = []
    i = 0
    while i < len(expr):
        if expr[i] in " ;\n":
            i += 1
            continue
        if expr[i] != "s" or i + 1 >= len(expr):
            return None
        delim = expr[i + 1]
        pieces, cur, j = [], [], i + 2
        while j < len(expr) and len(pieces) < 2:
            c = expr[j]
            if c == "\\" and j + 1 < len(expr):
                cur.append(expr[j:j + 2] if expr[j + 1] != delim else delim)
                j += 2
                continue
            if c == delim:
                pieces.append("".join(cur))
                cur = []
            else:
                cur.append(c)
            j += 1
        if len(pieces) < 2:
            return None
        m = re.match(r"[gI0-9]*", expr[j:])
        flags = m.group()
        j += m.end()
        pat = pieces[0] if ere else _bre(pieces[0])
        try:
            rx = re.compile(pat, re.I if "I" in flags else 0)
        except re.error:
            return None
        repl = re.sub(r"\\(\d)", r"\\g<\1>", pieces[1].replace("\\&", "\x01"))
        repl = repl.replace("&", r"\g<0>").replace("\x01", "&")
        out.append((rx, repl, 0 if "g" in flags else 1))
        i = j
    return out


def _bre(pattern: str) -> str:
    """A POSIX basic regular expression as a Python one (\\( \\) \\{ \\} \\+ \\? \\| special)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            n = pattern[i + 1]
            out.append(n if n in "(){}+?|" else "\\" + n)
            i += 2
            continue
        out.append("\\" + c if c in "(){}+?|" else c)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------------- entry

def run(text: str, *, env: dict[str, str] | None = None,
        read_file: Callable[[str], Optional[str]] | None = None,
        budget_s: float | None = None) -> Script:
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
        unused.append(f"{name}: the script sets it itself (line {line}) before reading it"
                      if line else f"{name}: the script never reads ${name}")
    for k in sorted(sh.env_positional - {int(n) for n in sh.env_read if n.isdigit()}):
        unused.append(f"{k}: the script never reads ${k}")
    return Script(sh.commands, dict(sh.vars), sh.sourced, dict(sh.files), sh.notes,
                  sh.problems, unused)

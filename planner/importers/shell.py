"""Read a bash launch script without running it: commands out, with variables expanded.

The subset a training launch script uses: comments, `\\` line continuations, '...' and "..."
quoting, `NAME=value` (also after export/declare/local/readonly), arrays `NAME=( ... )` and
`NAME+=( ... )` with `${NAME[@]}`, `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}`,
`${NAME:=default}`, `${NAME:+alt}`, `$((arithmetic))`, word splitting of unquoted expansions,
`;` `&&` `||` `|` `&` and redirections. Nothing is executed and the environment is not read:
a value that depends on a variable the script never sets (without a default), on a positional
parameter or on a command substitution comes out *unresolved*: a marker (`unresolved(name)`)
that callers name in their messages (`unresolved_names`, `display`). Control flow is read
straight through (both branches of an `if` assign; the later one wins).
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Union

__all__ = ["Command", "Script", "run", "unresolved", "unresolved_names", "only_unresolved",
           "display", "why"]

_MARK = "\x00"
_MARK_RE = re.compile(r"\x00([^\x00]*)\x00")
_CHUNK_RE = re.compile(r"(?:\x00[^\x00]*\x00|[^\s\x00])+")
_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_ASSIGN_RE = re.compile(r"([A-Za-z_]\w*)(\[[^\]]*\])?(\+?)=(.*)", re.DOTALL)
_META = frozenset(" \t\r\n;&|<>()")
_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{", "}",
                       "time", "exec", "fi", "done", "nohup", "command", "builtin"})


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


class _Lexer:
    """Characters to commands (lists of words, each a list of parts)."""

    def __init__(self, text: str):
        self.s, self.i, self.n, self.line = text, 0, len(text), 1

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def _skip_comment(self) -> None:
        j = self.s.find("\n", self.i)
        self.i = self.n if j < 0 else j

    def commands(self) -> list[tuple[int, list[list[_Part]]]]:
        out: list[tuple[int, list]] = []
        words: list[list[_Part]] = []
        start = self.line
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\\" and self.peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif c in " \t\r":
                self.i += 1
            elif c == "#":
                self._skip_comment()
            elif c in "\n;&|()":
                if words:
                    out.append((start, words))
                    words = []
                if c == "\n":
                    self.line += 1
                self.i += 1
            elif c in "<>":
                self._redirect(words)
            else:
                if not words:
                    start = self.line
                before = self.i
                words.append(self.word())
                if self.i == before:       # a stop character we do not handle: skip it
                    self.i += 1
        if words:
            out.append((start, words))
        return out

    def _redirect(self, words: list) -> None:
        """Drop `2>&1`, `> log`, `>> log`, `< file` (the fd digits and the target)."""
        prev = self.s[self.i - 1] if self.i else " "
        if words and prev not in " \t" and len(words[-1]) == 1 and isinstance(words[-1][0], _Lit) \
                and words[-1][0].text.isdigit():
            words.pop()
        while self.peek() in ("<", ">"):
            self.i += 1
        if self.peek() in ("&", "|"):
            self.i += 1
        while self.peek() in (" ", "\t"):
            self.i += 1
        if self.peek() and self.peek() not in _META:
            self.word()

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
                if c == "\n":
                    self.line += 1
                lit.append(c)
                self.i += 1
        push()
        return parts

    def _dquote(self) -> list[_Part]:
        self.i += 1
        parts: list[_Part] = []
        lit: list[str] = []

        def push() -> None:
            if lit:
                parts.append(_Lit("".join(lit), True))
                lit.clear()

        while self.i < self.n:
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\" and self.peek(1) in ('$', '`', '"', '\\', '\n'):
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
            else:
                if c == "\n":
                    self.line += 1
                lit.append(c)
                self.i += 1
        push()
        return parts or [_Lit("", True)]

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
            return _brace(self._balanced(2, "{", "}"), quoted)
        if nxt == "(" and self.peek(2) == "(":
            inner = self._balanced(3, "(", ")")     # up to the first of the closing pair
            if self.peek() == ")":
                self.i += 1
            return _Arith(_Lexer(inner).word(stop=frozenset()), quoted, raw=f"$(({inner}))")
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


def _brace(content: str, quoted: bool) -> _Part:
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
    arg = _Lexer(rest[op.end():]).word(stop=frozenset())
    return _Var(name, op.group(), arg, quoted, index, raw)


# --------------------------------------------------------------------------------- expansion

@dataclass(frozen=True)
class Command:
    """One simple command after expansion: its words (fields) and the line it starts on."""

    line: int
    words: tuple[str, ...]


@dataclass
class Script:
    """What running the script's assignments leaves: commands, variables, sourced files."""

    commands: list[Command]
    variables: dict[str, Union[str, list[str]]]
    sourced: list[str] = field(default_factory=list)

    def var(self, name: str) -> str | None:
        value = self.variables.get(name)
        if isinstance(value, list):
            return value[0] if value else ""
        return value


_ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.floordiv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
              ast.Pow: operator.pow}


def _arith_eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _arith_eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
        return _ARITH_OPS[type(node.op)](_arith_eval(node.left), _arith_eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith_eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("unsupported arithmetic")


class _Shell:
    def __init__(self) -> None:
        self.vars: dict[str, Union[str, list[str]]] = {}

    # values --------------------------------------------------------------------------------
    def _value(self, v: _Var) -> Union[str, list[str]]:
        """A variable reference's value: a string, or a list for a quoted [@]."""
        if v.op == "unsupported":
            return unresolved(v.raw)
        val = self.vars.get(v.name)
        is_set = val is not None
        null = not is_set or val in ("", [])
        if v.op in (":-", "-") and (null if v.op == ":-" else not is_set):
            return self.join(v.arg or [])
        if v.op in (":=", "=") and (null if v.op == ":=" else not is_set):
            value = self.join(v.arg or [])
            self.vars[v.name] = value
            return value
        if v.op in (":+", "+"):
            return self.join(v.arg or []) if (not null if v.op == ":+" else is_set) else ""
        if not is_set:
            return unresolved("$" + v.name)
        if isinstance(val, list):
            if v.index in ("@", "*"):
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

        def var(m: re.Match) -> str:
            value = self.vars.get(m.group())
            value = value[0] if isinstance(value, list) and value else value
            return unresolved("$" + m.group()) if value is None else (value or "0")

        text = _NAME_RE.sub(var, expr)
        names = unresolved_names(text)
        if names:
            return unresolved(names[0])
        try:
            return str(_arith_eval(ast.parse(text.strip(), mode="eval")))
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
            return unresolved(a.raw)

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
        out = []
        for part in parts:
            value, _ = self._piece(part)
            out.append(" ".join(value) if isinstance(value, list) else value)
        return "".join(out)

    def expand(self, parts: list[_Part]) -> list[str]:
        """A word's fields after expansion and word splitting."""
        fields: list[str] = []
        cur, have = "", False
        for part in parts:
            value, split = self._piece(part)
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
        return fields

    # statements ----------------------------------------------------------------------------
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
            old = self.vars.get(name)
            old = old if isinstance(old, list) else ([old] if old else [])
            self.vars[name] = (old + items) if append else items
            return True
        value = self.join(tail)
        if index:
            cur = self.vars.get(name)
            try:
                k = int(self.join(_Lexer(index[1:-1]).word(stop=frozenset())))
            except ValueError:
                return True
            cur = cur if isinstance(cur, list) else ([cur] if cur else [])
            cur = cur + [""] * (k + 1 - len(cur))
            cur[k] = value
            self.vars[name] = cur
            return True
        if append:
            old = self.vars.get(name) or ""
            value = (old[0] if isinstance(old, list) and old else old or "") + value
        self.vars[name] = value
        return True


def _plain(word: list[_Part]) -> str | None:
    if len(word) == 1 and isinstance(word[0], _Lit) and not word[0].quoted:
        return word[0].text
    return None


def run(text: str) -> Script:
    """Read a script: apply its assignments in order and expand every other command."""
    sh = _Shell()
    commands: list[Command] = []
    sourced: list[str] = []
    for line, raw in _Lexer(text).commands():
        words = list(raw)
        while words and _plain(words[0]) in _KEYWORDS:
            words.pop(0)
        if not words:
            continue
        head = _plain(words[0])
        if head in ("export", "declare", "typeset", "local", "readonly"):
            for w in words[1:]:
                if not (_plain(w) or "").startswith("-"):
                    sh.assign(w)
            continue
        if head in ("source", "."):
            sourced.extend(display(f) for w in words[1:2] for f in sh.expand(w))
            continue
        if head == "unset":
            for w in words[1:]:
                sh.vars.pop(_plain(w) or "", None)
            continue
        k = 0
        while k < len(words) and sh.assign(words[k]):
            k += 1
        if k == len(words):
            continue
        fields = [f for w in words[k:] for f in sh.expand(w)]
        if fields:
            commands.append(Command(line, tuple(fields)))
    return Script(commands, dict(sh.vars), sourced)

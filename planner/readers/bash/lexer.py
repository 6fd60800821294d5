"""The bash lexer: characters to tokens. Owns the parsed words (literal, variable, command
substitution, arithmetic and array parts), redirections and here-document bodies, and the
`${...}` forms it recognises."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

# the limits are read from the package (planner.readers.bash.MAX_DEPTH ...) when they
# are checked, so setting one there holds for every stage
from planner.readers import bash as knobs
from planner.readers.bash.common import _MARK, _limit

_LIT_RUN = re.compile(r"[^\s;&|<>()'\"\\$`\x00]+")
_META = frozenset(" \t\r\n;&|<>()")
_DB_STOP = frozenset(" \t\r\n;")
_START_KEYWORDS = frozenset(
    {
        "then",
        "do",
        "else",
        "elif",
        "if",
        "while",
        "until",
        "!",
        "{",
        "}",
        "time",
        "fi",
        "done",
        "esac",
        "in",
    }
)


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
    body: list | None = None  # a here-document or here-string, as word parts


@dataclass
class _Tok:
    kind: str  # word | op | redir | arith
    value: object
    line: int
    start: int = 0
    end: int = 0


class _Lexer:
    """Characters to tokens: words (lists of parts), operators, redirections, `(( ))`."""

    def __init__(self, text: str, depth: int = 0):
        if depth > knobs.MAX_DEPTH:
            raise _limit(f"expansions nest deeper than {knobs.MAX_DEPTH} levels", 0)
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
                out.append(
                    _Tok("word", [_Sub(c + "(" + text + ")", False)], self.line, start, self.i)
                )
                at_start = False
            elif (c in "<>" or (c == "&" and self.peek(1) == ">")) and not self.dbracket:
                out.append(_Tok("redir", self._redirect(out), self.line, start, self.i))
            elif c in ";&|" and not self.dbracket:
                op = next(
                    o
                    for o in (";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|")
                    if self.s.startswith(o, self.i)
                )
                self.i += len(op)
                out.append(_Tok("op", op, self.line, start, self.i))
                at_start = True
            elif (
                c == "("
                and self.peek(1) == "("
                and not self.dbracket
                and (
                    at_start or (out and out[-1].kind == "word" and _plain(out[-1].value) == "for")
                )
            ):
                # `(( expr ))`, or the header of an arithmetic `for (( init; cond; step ))`
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
                if self.i == start:  # a stop character we do not handle: skip it
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
        op = next(
            o
            for o in ("&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">&", ">>", ">|", "<", ">")
            if self.s.startswith(o, self.i)
        )
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
                text = self.s[self.i : end]
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
                text = self.s[self.i + 1 : j]
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

        escapes = ("$", "`", '"', "\\", "\n") if closing else ("$", "`", "\\", "\n")
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
                lit.append(self.s[self.i : j])
                self.i = j
        push()
        return parts or [_Lit("", True)]

    def _marker(self) -> str:
        """An unresolved marker in text read again (bash -c, eval): kept whole, unexpanded."""
        j = self.s.find(_MARK, self.i + 1)
        j = self.n - 1 if j < 0 else j
        text = self.s[self.i : j + 1]
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
                    return self.s[start : self.i - 1]
            self.i += 1
        return self.s[start : self.i]

    def _dollar(self, *, quoted: bool) -> _Part:
        nxt = self.peek(1)
        if nxt == "{":
            return _brace(self._balanced(2, "{", "}"), quoted, self.depth + 1)
        if nxt == "(" and self.peek(2) == "(":
            inner = self._balanced(3, "(", ")")  # up to the first of the closing pair
            if self.peek() == ")":
                self.i += 1
            return _Arith(
                _Lexer(inner, self.depth + 1).word(stop=frozenset()), quoted, raw=f"$(({inner}))"
            )
        if nxt == "(":
            return _Sub("$(" + self._balanced(2, "(", ")") + ")", quoted)
        m = re.match(r"[A-Za-z_]\w*|[0-9]|[@*#?$!-]", self.s[self.i + 1 : self.i + 200])
        if m:
            self.i += 1 + len(m.group())
            return _Var(m.group(), None, None, quoted, raw="$" + m.group())
        self.i += 1
        return _Lit("$", quoted)

    def _backtick(self, *, quoted: bool) -> _Sub:
        j = self.s.find("`", self.i + 1)
        j = self.n if j < 0 else j
        text = self.s[self.i : j + 1]
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
    name, index, rest = m.group(1), m.group(3), content[m.end() :]
    if not rest:
        return _Var(name, None, None, quoted, index, raw)
    op = re.match(r":?[-=+?]", rest)
    if not op:
        return _Var(name, "unsupported", None, quoted, index, raw)
    arg = _Lexer(rest[op.end() :], depth).word(stop=frozenset())
    return _Var(name, op.group(), arg, quoted, index, raw)


def _plain(word: list[_Part]) -> str | None:
    if len(word) == 1 and isinstance(word[0], _Lit) and not word[0].quoted:
        return word[0].text
    return None

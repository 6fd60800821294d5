"""The bash parser: tokens to a tree of commands (simple commands, pipelines, `&&`/`||`,
`if`, `for`/`while`/`until`, `case`, `{ }` and `( )`, functions, `(( ))`). What bash would
call a syntax error is recorded in the parser's problems, not raised."""

from __future__ import annotations

from dataclasses import dataclass

# the limits are read from the package (planner.readers.bash.MAX_DEPTH ...) when they
# are checked, so setting one there holds for every stage
from planner.readers import bash as knobs
from planner.readers.bash.common import _NAME_RE, _limit
from planner.readers.bash.lexer import _Lexer, _plain, _Tok

_CLOSERS = frozenset({"then", "fi", "done", "esac", "elif", "else", "do", "}", "in"})


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
    branches: list  # [(condition list, body list, condition text)]
    orelse: list | None


@dataclass
class _Loop:
    line: int
    kind: str  # for | while | until
    var: str | None
    items: list | None
    cond: list | None
    body: list
    header: tuple[str, str, str] | None = None  # for (( init; cond; step )): the three parts


@dataclass
class _Case:
    line: int
    subject: list
    arms: list  # [(patterns, body)]
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
            self.problems.append(
                f"line {line}: `{word}` is missing (bash rejects the script there)"
            )

    def newlines(self) -> None:
        while self.op() == "\n":
            self.advance()

    def parse_list(self, stops: frozenset = frozenset(), stop_ops: frozenset = frozenset()):
        items = []
        while True:
            while self.op() in ("\n", ";", "&"):
                self.advance()
            tok = self.peek()
            if tok is None or (tok.kind == "op" and tok.value in stop_ops) or self.kw() in stops:
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
        if self.depth > knobs.MAX_DEPTH:
            tok = self.peek()
            raise _limit(
                f"compound commands nest deeper than {knobs.MAX_DEPTH} levels",
                tok.line if tok else 0,
            )
        try:
            node = self._command()
            while self.peek() is not None and self.peek().kind == "redir":
                self.advance()  # `done < file`, `} > log`: nothing to read
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
        return _Simple(first.line, words, redirs, self.src[first.start : last.end])

    def _if(self) -> _If:
        line = self.advance().line
        branches = []
        kw = "if"
        while kw in ("if", "elif"):
            start = self.peek()
            cond = self.parse_list(frozenset({"then"}))
            end = self.t[self.k - 1] if self.k else start
            text = self.src[start.start : end.end].strip(" \t\n;") if start is not None else ""
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
        header = None
        if self.peek() is not None and self.peek().kind == "arith":  # for (( ; ; ))
            parts = self.advance().value.split(";")
            var, items = None, []
            if len(parts) == 3:
                header = (parts[0], parts[1], parts[2])
            else:
                self.problems.append(
                    f"line {line}: `for (( ))` needs three parts (init; "
                    "condition; step) (bash rejects the script there)"
                )
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
        return _Loop(line, "for", var, items, None, body, header)

    def _case(self) -> _Case:
        tok = self.advance()
        subject = (
            self.advance().value if self.peek() is not None and self.peek().kind == "word" else []
        )
        text = self.src[tok.start : self.t[self.k - 1].end]
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

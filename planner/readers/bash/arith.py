"""Bash arithmetic (`$((...))`, `(( ))`) on 64-bit integers: a value outside them is a
limit error, not a wrap; an expression planner does not evaluate is an _ArithError (the
value comes out unresolved)."""

from __future__ import annotations

import re
from collections.abc import Callable

from planner.readers.bash.common import _limit

_INT64 = 2**63
_MAX_ARITH_NEST = 32  # each level is ~14 Python frames: 32 stay far from the 1000 limit

_ARITH_TOKEN = re.compile(
    r"\s*(?:(0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)|([A-Za-z_]\w*)|"
    r"(\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%<>&|^!~?:()]))"
)
_BINARY = [
    ("||",),
    ("&&",),
    ("|",),
    ("^",),
    ("&",),
    ("==", "!="),
    ("<", ">", "<=", ">="),
    ("<<", ">>"),
    ("+", "-"),
    ("*", "/", "%"),
]


class _ArithError(Exception):
    """The expression is not one planner evaluates (the value comes out unresolved)."""


class _Arith64:
    """Bash arithmetic on 64-bit integers: a value outside them is a limit error, not a wrap."""

    def __init__(self, text: str, lookup: Callable[[str], str | None], line: int, depth: int = 0):
        self.toks = []
        pos = 0
        while pos < len(text):
            m = _ARITH_TOKEN.match(text, pos)
            if not m:
                if text[pos:].strip():
                    raise _ArithError(text)
                break
            self.toks.append(
                m.group(1)
                and ("num", m.group(1))
                or m.group(2)
                and ("name", m.group(2))
                or ("op", m.group(3))
            )
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
            raise _limit(
                f"$(({self.raw.strip()[:60]})) overflows the 64-bit integers bash computes with",
                self.line,
            )
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
            exp = self._power(level + 1)  # right-associative
            if exp < 0:
                raise _ArithError(self.raw)
            if abs(base) > 1 and exp > 64:
                raise _limit(
                    f"$(({self.raw.strip()[:60]})) overflows the 64-bit integers bash "
                    "computes with",
                    self.line,
                )
            return self._check(base**exp)
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
            return _INT64  # _check names the overflow
        return int(tok)
    except ValueError:
        raise _ArithError(raw) from None


def _apply(op: str, a: int, b: int, raw: str) -> int:
    if op in ("/", "%"):
        if b == 0:
            raise _ArithError(raw)  # bash: division by 0
        q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # C truncation
        return q if op == "/" else a - q * b
    if op in ("<<", ">>"):
        if not 0 <= b < 64:
            raise _ArithError(raw)
        return a << b if op == "<<" else a >> b
    return {
        "+": a + b,
        "-": a - b,
        "*": a * b,
        "<": int(a < b),
        ">": int(a > b),
        "<=": int(a <= b),
        ">=": int(a >= b),
        "==": int(a == b),
        "!=": int(a != b),
        "&&": int(bool(a and b)),
        "||": int(bool(a or b)),
        "&": a & b,
        "|": a | b,
        "^": a ^ b,
    }[op]

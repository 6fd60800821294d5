"""Test commands (`[ ]`, `test`, `[[ ]]`) over expanded operands, decided for the plain run:
unset variables are empty, named files exist, and each such guess is named."""

from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING

from planner.readers.bash.common import _MARK_RE, _is_unset_marker, _path_key, display

if TYPE_CHECKING:
    from planner.readers.bash.interp import _Shell


def _plain_value(text: str) -> tuple[str | None, list[str]]:
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
_NUMERIC = {
    "-eq": lambda a, b: a == b,
    "-ne": lambda a, b: a != b,
    "-lt": lambda a, b: a < b,
    "-le": lambda a, b: a <= b,
    "-gt": lambda a, b: a > b,
    "-ge": lambda a, b: a >= b,
}


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

    def tok(self, k: int = 0) -> str | None:
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

    def value(self, text: str) -> str | None:
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
        if (
            op1 in ("=", "==", "!=", "<", ">", "=~")
            or op1 in _NUMERIC
            or op1 in ("-nt", "-ot", "-ef")
        ):
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
                return op == "-n"  # a command prints something
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

"""What the commands that write config files print: cat, echo, printf, sed (its `s`
commands, BRE or ERE, in place or not), envsubst and tee; None for any other command (not
run)."""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from planner.readers.bash.common import _path_key

if TYPE_CHECKING:
    from planner.readers.bash.interp import _Shell


def _stdout(fields: list[str], stdin: str | None, sh: _Shell) -> str | None:
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
        chunks = [rest[i : i + n] for i in range(0, len(rest), n)]
        return "".join(fmt % tuple(c + [""] * (n - len(c))) for c in chunks).replace("\x01", "%")
    if head == "sed":
        return _sed(args, stdin, sh)
    if head == "envsubst":
        if stdin is None:
            return None
        return re.sub(
            r"\$\{?([A-Za-z_]\w*)\}?",
            lambda m: (
                sh.vars.get(m.group(1), "") if isinstance(sh.vars.get(m.group(1), ""), str) else ""
            ),
            stdin,
        )
    if head == "tee":
        append = any(a in ("-a", "--append") for a in args)
        for name in (a for a in args if not a.startswith("-")):
            key = _path_key(name)
            old = sh.files.get(key, "") if append else ""
            sh.files[key] = None if old is None or stdin is None else old + stdin
        return stdin
    return None


def _sed(args: list[str], stdin: str | None, sh: _Shell) -> str | None:
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
            return None  # -n, -f script, ...: not followed
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
                cur.append(expr[j : j + 2] if expr[j + 1] != delim else delim)
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

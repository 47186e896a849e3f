"""What an "always allow" for a command is bound to: the workspace code it names, as it is.

A grant for `sh ./task.sh` must not cover whatever task.sh says after the model rewrites it
(in main, file writes are not asked). The rule is lexical and errs toward asking:

- the command is cut into words twice, as the shell would (`shlex`, so `"./my task.sh"` and
  `my\\ task.sh` are one word; a quoted `bash -c "…"` string is cut again) and at every
  quote, space and shell punctuation (so `--config=tools/c.json` and `(cd t; ./x.py)` yield
  their paths);
- `~`, `$HOME` and `$PWD` mean the workspace (exec's home and working directory); any other
  `$` or a backtick cannot be resolved here, so such a command is never granted (asked
  each time), nor is one the shell could not parse;
- each word is taken from the workspace root and from every workspace folder the command
  names (a `cd`), with globs expanded, `a.b` also as `a/b.py` (`python -m`), and a few
  runners' implicit files added (`make` → Makefile, `npm` → package.json, …);
- a file found inside the workspace is bound, by its SHA-256 (one over 16 MiB by size, mtime
  and inode), when it can be code: the word after an interpreter or `source`/`.` (`sh task`),
  an executable file, one starting with `#!`, a script extension (`.py`, `.sh`, `.js`, …) or
  a runner's file — and every file the command names when an interpreter reads its program
  from stdin (`sh < task`, `cat task | sh`). Data a command merely reads or writes (`echo 1
  >> notes.txt`) is not bound, so such a grant keeps holding while the file grows.

The grant holds while the same code files have the same content: one that appears, changes
or disappears makes the command ask again. Files a program opens without the command naming
them (an import, a config it finds itself) are not bound.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shlex
import stat
from pathlib import Path

MAX_WORDS = 512
MAX_FILES = 64
MAX_BASES = 16
LARGE_FILE = 16 * 1024 * 1024

_SPLIT = re.compile(r"[^\s'\"`;&|<>(){}=,]+")
_HOME = re.compile(r"\$\{?(HOME|PWD)\}?(?![A-Za-z0-9_])")
_GLOB = re.compile(r"[*?\[]")
IMPLICIT: dict[str, tuple[str, ...]] = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "gmake": ("Makefile", "makefile", "GNUmakefile"),
    "npm": ("package.json",),
    "pnpm": ("package.json",),
    "yarn": ("package.json",),
    "just": ("justfile", "Justfile", ".justfile"),
    "tox": ("tox.ini",),
}
"""Files some runners read from the working directory without being named."""
_RUNNER_FILES = frozenset(name for names in IMPLICIT.values() for name in names)
CODE_SUFFIXES = frozenset(
    ".sh .bash .zsh .ksh .fish .py .pyw .js .mjs .cjs .ts .tsx .jsx .rb .pl .pm .php .lua .r "
    ".awk .sed .mk .tcl .el .go .java .kt .kts .swift .c .cc .cpp .rs .ps1 .bat .cmd .jar".split()
)
_OPERATOR = re.compile(r"[|&;<>()]+")
_INTERPRETER = re.compile(
    r"(ba|da|z|k|c|tc|fi|a)?sh|python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|tsx|ts-node|perl|"
    r"ruby|php|lua|Rscript|tclsh|wish|source|\.|exec|env|nohup|time|timeout|xargs|awk|gawk|"
    r"sed|java|go|uv|pipx|npx"
)


class Unbindable(Exception):
    """The command's files cannot be told from its text; it may be approved only once."""


def command_binding(command: str, workspace: Path) -> str:
    """The canonical text of what a grant for `command` (run in `workspace`) is bound to:
    "" when it names no workspace code. Raises Unbindable (see the module docstring)."""
    root = os.path.realpath(workspace)
    text = _HOME.sub(lambda _m: root, command.replace("~/", root + "/"))
    if "$" in text or "`" in text:
        raise Unbindable("the command expands variables or runs a command substitution")
    tokens = _shell_words(text, depth=2)
    words = set(_SPLIT.findall(text)) | set(tokens)
    if len(words) > MAX_WORDS:
        raise Unbindable("the command names too many words")
    run, from_stdin = _programs(tokens)
    for word in list(words):
        words.update(IMPLICIT.get(os.path.basename(word), ()))
        if "." in word and "/" not in word and not word.startswith("."):
            module = word.replace(".", "/")
            words.update((f"{module}.py", f"{module}/__main__.py"))
    bases = [root, *(p for p in (_inside(root, os.path.join(root, w)) for w in words) if p and os.path.isdir(p))]
    if len(bases) > MAX_BASES:
        raise Unbindable("the command names too many folders")
    states: dict[str, str] = {}
    for base in bases:
        for word in words:
            for path in _candidates(os.path.join(base, word)):
                inside = _inside(root, path)
                rel = os.path.relpath(inside, root) if inside is not None else None
                if inside is None or rel in states:
                    continue
                state = _state(inside, forced=from_stdin or word in run)
                if state is not None:
                    states[rel] = state
                    if len(states) > MAX_FILES:
                        raise Unbindable("the command names too many files")
    return json.dumps(sorted(states.items()), ensure_ascii=True, separators=(",", ":")) if states else ""


def _shell_words(text: str, depth: int) -> list[str]:
    """The words as the shell splits them, operators apart; a word with spaces in it (a
    `-c` script) is split again, up to `depth` times. Raises Unbindable."""
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        raise Unbindable("the command cannot be parsed") from None
    if len(words) > MAX_WORDS:
        raise Unbindable("the command names too many words")
    out: list[str] = []
    for word in words:
        out.append(word)
        if depth > 0 and any(ch.isspace() for ch in word):
            out.extend(_shell_words(word, depth - 1))
    return out


def _programs(tokens: list[str]) -> tuple[set[str], bool]:
    """(the words interpreters run — the first non-option word after one, whatever its
    name; whether one reads its program from stdin, as in `sh < task` or `cat task | sh`:
    then any file the command names may be the program)."""
    run: set[str] = set()
    from_stdin = False
    for i, token in enumerate(tokens):
        if _INTERPRETER.fullmatch(os.path.basename(token)) is None:
            continue
        following = [t for t in tokens[i + 1 :] if not t.startswith("-")][:1]
        if not following or _OPERATOR.fullmatch(following[0]):
            from_stdin = True
        else:
            run.add(following[0])
    return run, from_stdin


def bound_files(binding: str) -> list[str]:
    """The workspace-relative paths a binding names (for messages and listings)."""
    return [path for path, _ in json.loads(binding)] if binding else []


def binding_note(binding: str) -> str:
    """" while task.sh is unchanged" for a listing or the audit trail; "" when unbound."""
    files = bound_files(binding)
    if not files:
        return ""
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return f" while {shown} {'is' if len(files) == 1 else 'are'} unchanged"


def _candidates(path: str) -> list[str]:
    if not _GLOB.search(path):
        return [path]
    matches = glob.glob(path)
    if len(matches) > MAX_FILES:
        raise Unbindable("a pattern in the command matches too many files")
    return matches


def _inside(root: str, path: str) -> str | None:
    """`path` normalised if it lies in the workspace (lexically: a link to outside is hashed
    as what it points to), else None."""
    path = os.path.normpath(path)
    return path if path.startswith(root.rstrip(os.sep) + os.sep) else None


def _state(path: str, *, forced: bool) -> str | None:
    """The file's content digest when it is a regular file that can be code (or `forced`:
    named as a program); else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    name = os.path.basename(path)
    code = forced or st.st_mode & 0o111 or os.path.splitext(name)[1].lower() in CODE_SUFFIXES or name in _RUNNER_FILES
    if st.st_size > LARGE_FILE:
        return f"size:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}" if code else None
    digest = hashlib.sha256()
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat cannot hang the check.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return "unreadable" if code else None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return "not-a-file"
        first = fh.read(1 << 20)
        if not code and not first.startswith(b"#!"):
            return None
        while first:
            digest.update(first)
            first = fh.read(1 << 20)
    return f"sha256:{digest.hexdigest()}"

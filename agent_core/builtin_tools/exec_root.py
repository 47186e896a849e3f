"""The empty root a sub scope's command starts from: an allow-list of the machine.

A command in a group (or a paired user's chat) must not see the owner's files outside the
workspace, what the owner's processes left in /tmp, or anything else of the machine it does
not need. Rather than cover what is private (a deny-list that misses whatever nobody thought
of), the sandbox builds a new root from nothing and binds into it only:

    /usr /bin /sbin /lib /lib32 /lib64 /libx32     read-only (a symbolic link stays a link)
    /etc: ETC_ALLOWED entries                      read-only; passwd, group, hosts of its own
    /dev: null zero full random urandom            fd/stdin/stdout/stderr links, a private shm
    /proc                                          fresh: the command's PID namespace only
    /tmp                                           private, empty, TMP_SIZE
    the scope's own allow-list (exec_view)         at the same paths as on the machine

Roost's private paths stay covered wherever they fall inside one of these. The root itself
and every mount point in it are read-only once built.

The new root is a tmpfs mounted over /tmp (of the private mount namespace); anything bound
from under the machine's /tmp goes through a descriptor of it opened first. `SETUP_SCRIPT`
(sandbox.py) then pivots into it and detaches the old root, so nothing else is reachable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ALLOWED = (
    "alternatives", "ca-certificates", "ssl/certs", "ssl/openssl.cnf", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "host.conf", "gai.conf", "protocols",
    "services", "mime.types", "os-release", "debian_version", "locale.alias", "magic", "magic.mime",
    "inputrc", "terminfo", "fonts", "perl", "python3", "python3.*",
)
"""Globs under /etc that programs need to run (the dynamic linker, time zone, certificates,
interpreters' own config). Not the host's users, hostname, machine-id, ssh or ssl private
keys, sudoers, credentials of services, or anything else."""
ETC_OWN = {
    "passwd": "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
}
"""Written into the new root instead of the host's (whose user names and addresses are the
owner's): enough for `whoami`, `id` and `localhost` to work."""
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
TMP_SIZE = "128m"
"""A sub scope's /tmp and /dev/shm each: scratch space, not a way to fill the machine's memory."""
BUILT_AT = Path("/tmp")
"""Where the new root is assembled before the pivot (inside the private mount namespace)."""


def _inside(path: Path, ancestor: Path) -> bool:
    return path == ancestor or ancestor in path.parents


def _system_entries(paths: Iterable[Path]) -> tuple[list[tuple[Path, str]], list[Path]]:
    """(links to recreate, paths to bind read-only) for the system part of the root. A path
    reached through a symbolic link elsewhere than its last part is left out."""
    links: list[tuple[Path, str]] = []
    binds: list[Path] = []
    for path in paths:
        if path.is_symlink():
            if path.parent.resolve() == path.parent:
                links.append((path, os.readlink(path)))
        elif path.exists() and path.resolve() == path:
            binds.append(path)
    return links, binds


def system_view() -> tuple[list[tuple[Path, str]], list[Path]]:
    etc = Path("/etc")
    entries = [Path(p) for p in SYSTEM_PATHS]
    entries += sorted({p for pattern in ETC_ALLOWED for p in etc.glob(pattern)})
    return _system_entries(entries)


def plan_root(hide: list[Path], show: list[Path], frozen: set[Path], tmp_size: str = TMP_SIZE) -> tuple[str, ...]:
    """Setup ops (see SETUP_SCRIPT) building the empty root. `hide`, `show` and `frozen`
    are resolved absolute paths: Roost's private paths, the scope's allow-list, and the
    part of it that is read-only."""
    base = BUILT_AT.resolve()

    def dst(path: Path | str) -> str:
        return f"{base}{path}"

    def src(path: Path) -> str:
        if _inside(path, base):  # covered by the new root: read through the descriptor
            return f"/proc/self/fd/3/{path.relative_to(base).as_posix()}"
        return str(path)

    ops: list[str] = [f"o:3:{base}", f"N:{base}", f"t:{tmp_size}:{dst('/tmp')}", f"d:{dst('/dev')}"]
    for name in DEVICES:
        if Path("/dev", name).exists():
            ops += ["m:rw", f"/dev/{name}", dst(f"/dev/{name}")]
    for name, target in DEV_LINKS.items():
        ops += [f"l:{dst(f'/dev/{name}')}", target]
    ops += [f"t:{tmp_size}:{dst('/dev/shm')}", "m:rw", "/proc", dst("/proc")]
    for name, text in ETC_OWN.items():
        ops += [f"w:{dst(f'/etc/{name}')}", text]
    links, system = system_view()
    for path, target in links:
        ops += [f"l:{dst(path)}", target]
    shown = {p: True for p in system}
    shown.update({p: p in frozen for p in show if p not in shown})
    # Ancestors first; at equal paths the cover goes on before the bind (shown wins).
    events = sorted([(len(p.parts), 0, p) for p in hide] + [(len(p.parts), 1, p) for p in shown])
    applied: list[tuple[Path, bool]] = []  # (path, visible?); the root starts empty
    covers: list[Path] = []
    bound: set[Path] = set()
    for _, kind, path in events:
        visible = False
        depth = -1
        for done, is_visible in applied:
            if _inside(path, done) and len(done.parts) >= depth:
                depth, visible = len(done.parts), is_visible
        if kind == 0:
            if visible:  # a private path inside something bound: cover it there
                ops.append(f"{'d' if path.is_dir() else 'f'}:{dst(path)}")
                covers.append(path)
                applied.append((path, False))
        else:
            ops += [f"m:{'ro' if shown[path] else 'rw'}", src(path), dst(path)]
            bound.add(path)
            applied.append((path, True))
    ops += [f"r:{dst(p)}" for p in covers if p not in bound] + [f"r:{dst('/dev')}", f"E:{base}"]
    return tuple(ops)

"""Where `exec` commands run: fresh user, PID and mount namespaces that cannot see Roost.

Each command starts through util-linux `unshare --user --map-root-user --pid --fork
--kill-child --mount-proc --mount`, then a small setup script (pid 1 of the new PID
namespace) hides Roost's private paths and starts the command without capabilities:

- `/proc` is a fresh mount for the new PID namespace, so Roost's processes (and their
  `environ`, `cmdline`, `mem`, open files) do not exist for the command.
- Each hidden path is covered inside the private mount namespace: a directory by an empty
  read-only tmpfs, a file by `/dev/null`. Directories the command must see (the workspace,
  its working directory) are bound back from a file descriptor opened before the cover.
- The command runs with an empty capability bounding set and `no_new_privs`, so it cannot
  unmount the covers, and a nested namespace it creates inherits them locked.
- pid 1 waits for the command and exits with its status; the kernel then kills everything
  left in the namespace (`setsid` or not). Killing pid 1 (or `unshare`, via `--kill-child`)
  does the same on a timeout.
- The environment is an allow-list (`command_env`): nothing Roost was started with leaks.
- /tmp, /var/tmp and /dev/shm are private to each command (an empty tmpfs): it sees nothing
  another process left there, and leaves nothing behind.
- A sub scope's command (`isolated`) starts from an empty root instead (`exec_root.py`: system
  directories read-only, an /etc allow-list, its own folders only) in network and IPC
  namespaces of its own: it cannot reach the host's loopback (Roost's webhook port, a local
  PostgreSQL) or anything else. The owner's chat keeps the host's network.

If the namespaces cannot be created, `probe` says why and `exec` refuses to run anything;
only the owner's explicit `ROOST_AGENT__EXEC_SANDBOX=off` runs commands unsandboxed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent_core.builtin_tools.exec_root import plan_root

SandboxMode = Literal["auto", "off"]

SAFE_ENV = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "COLORTERM"})
"""Variables passed to commands (plus LC_*); everything else Roost has stays with Roost."""
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SETUP_FAILED = 125
"""Exit status of the setup script when it could not hide a path (the command never ran)."""
_PROBE_TIMEOUT_S = 10.0
_TOOLS = ("unshare", "mount", "setpriv")
_ROOT_TOOLS = ("pivot_root", "umount")
"""Needed only to build a sub scope's empty root."""
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
"""Shared scratch places, private to each command (an empty tmpfs)."""
SCRATCH_SIZE = "50%"
"""Of memory, as an ordinary tmpfs /tmp: the owner's commands keep the room they had."""

# Arguments: <mount> <setpriv> <sh> <workdir> <pivot_root> <umount>, then ops, then "--"
# <command>. Ops: "o:<fd>:<dir>" opens a directory that will be covered on fd (before anything
# is), "d:<dir>" covers a directory with an empty tmpfs, "f:<file>" covers a file with
# /dev/null, "b:<fd>:<rel>" binds <rel> inside fd's original directory back to the same place
# (its mount point is made in the tmpfs), "B:<fd>:<rel>" the same for a file, "r:<dir>" makes
# a cover read-only once every mount point in it exists, "R:<path>" a bound-back path,
# "t:<size>:<dir>" mounts a private writable tmpfs on <dir>.
# An empty root (exec_root.py): "N:<dir>" mounts it on <dir>; "m:ro"/"m:rw" <src> <dst> binds
# src (a directory or file) at dst; "l:<dst>" <target> makes a symbolic link; "w:<dst>" <text>
# writes a file; "E:<dir>" pivots into the root on <dir>, detaches the old one and makes the
# root read-only.
SETUP_SCRIPT = r"""
fail() { echo "roost sandbox: $*" >&2; exit 125; }
ro() { "$mnt" -o remount,bind,ro "$1" 2>/dev/null || "$mnt" -o remount,bind,ro,nosuid,nodev "$1" 2>/dev/null \
         || "$mnt" -o remount,bind,ro,nosuid,nodev,noexec "$1" || fail "cannot make $1 read-only"; }
mkd() { [ -d "$1" ] || mkdir -p "$1"; }  # the set-up runs dozens of steps: no needless exec
mnt=$1; priv=$2; shell=$3; workdir=$4; pivot=$5; umnt=$6; shift 6
while [ "$1" != "--" ]; do
  op=$1; shift
  case $op in
    o:*) rest=${op#o:}; fd=${rest%%:*}; dir=${rest#*:}
         eval "exec $fd<\"\$dir\" && d$fd=\$dir" || fail "cannot open $dir" ;;
    d:*) mkd "${op#d:}" \
           && "$mnt" -t tmpfs -o nosuid,nodev,noexec,size=16k,nr_inodes=64,mode=0555 roost-hidden "${op#d:}" \
           || fail "cannot hide ${op#d:}" ;;
    r:*) "$mnt" -o remount,bind,ro,nosuid,nodev,noexec "${op#r:}" || fail "cannot seal ${op#r:}" ;;
    f:*) "$mnt" --bind /dev/null "${op#f:}" || fail "cannot hide ${op#f:}" ;;
    t:*) rest=${op#t:}; size=${rest%%:*}; dir=${rest#*:}
         mkd "$dir" && "$mnt" -t tmpfs -o "nosuid,nodev,mode=1777,size=$size" roost-tmp "$dir" \
           || fail "cannot make a private $dir" ;;
    b:*|B:*) rest=${op#?:}; fd=${rest%%:*}; rel=${rest#*:}; eval "base=\$d$fd"
         target="$base/$rel"; [ "$rel" = . ] && target=$base
         case $op in
           b:*) mkdir -p "$target" ;;
           *) [ -e "$target" ] || { mkdir -p "${target%/*}" && : > "$target"; } ;;
         esac && "$mnt" --no-canonicalize --bind "/proc/self/fd/$fd/$rel" "$target" \
           || fail "cannot show $target" ;;
    R:*) ro "${op#R:}" ;;
    N:*) "$mnt" -t tmpfs -o nosuid,nodev,mode=0755,size=1m roost-root "${op#N:}" || fail "cannot make an empty root" ;;
    m:*) src=$1; dst=$2; shift 2
         if [ -d "$src" ]; then mkd "$dst"; else [ -e "$dst" ] || { mkd "${dst%/*}" && : > "$dst"; }; fi \
           || fail "cannot show $dst"
         if [ "$op" = m:ro ]; then  # one call where mount(8) can (util-linux >= 2.27)
           "$mnt" --no-canonicalize --bind -o ro "$src" "$dst" 2>/dev/null \
             || { "$mnt" --no-canonicalize --bind "$src" "$dst" && ro "$dst"; } || fail "cannot show $dst"
         else "$mnt" --no-canonicalize --bind "$src" "$dst" || fail "cannot show $dst"; fi ;;
    l:*) dst=${op#l:}; mkd "${dst%/*}" && ln -s "$1" "$dst" || fail "cannot link $dst"; shift ;;
    w:*) dst=${op#w:}; mkd "${dst%/*}" && printf '%s' "$1" > "$dst" || fail "cannot write $dst"; shift ;;
    E:*) cd "${op#E:}" && "$pivot" . . && "$umnt" -l . && cd / && "$mnt" -o remount,bind,ro / \
           || fail "cannot enter the new root" ;;
    *) fail "unknown set-up step $op" ;;
  esac
done
shift
i=3; while [ "$i" -lt 10 ]; do eval "exec $i<&-"; i=$((i + 1)); done
cd "$workdir" || fail "cannot enter $workdir"
"$priv" --no-new-privs --inh-caps=-all --bounding-set=-all -- "$shell" -c "$1" &
wait $!
"""
"""pid 1 of the command's PID namespace. It keeps its capabilities (inside the namespace
only) and never runs the command's code; the command runs as its child without any."""
_MAX_OPEN_DIRS = 7
"""fds 3..9 are free in the setup shell: one per covered directory with something inside
it to show again."""


class SandboxUnavailable(Exception):
    """The namespaces could not be created here; the message says why and how to fix it."""


@dataclass(frozen=True, slots=True)
class MountPlan:
    """Ordered setup ops (see SETUP_SCRIPT) for one command."""

    ops: tuple[str, ...]


def _inside(path: Path, ancestor: Path) -> bool:
    return path == ancestor or ancestor in path.parents


def _resolve(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        try:
            path = Path(raw).expanduser().resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # nothing there to read
        if path != Path("/") and path not in out:
            out.append(path)
    return out


def _with_companions(paths: Iterable[Path]) -> list[Path]:
    """A SQLite database keeps recent writes in `-wal` (and `-journal`) beside the file."""
    out: list[Path] = []
    for path in paths:
        out.append(path)
        out.extend(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))
    return out


def plan_mounts(
    hidden: Iterable[Path], exposed: Iterable[Path], read_only: Iterable[Path] = (),
    scratch: Iterable[Path] = (),
) -> MountPlan:
    """Cover every hidden path, and keep every exposed path (directory or file) visible
    even when it lies inside a hidden one — read-only if it is in `read_only`; a hidden
    path inside an exposed directory is covered after it is bound back. A `scratch`
    directory is covered by a private writable tmpfs instead. Paths that do not exist are
    skipped (there is nothing to read)."""
    private = set(_resolve(scratch))
    hide = _resolve(_with_companions(hidden))
    hide += [p for p in private if p not in hide]
    show = _resolve(exposed)
    frozen = set(_resolve(read_only))
    # Ancestors first; at equal paths the cover goes on before the bind-back (shown wins).
    events = sorted(
        [(len(p.parts), 0, p) for p in hide] + [(len(p.parts), 1, p) for p in show]
    )
    applied: list[tuple[Path, bool]] = []  # (path, hidden?) in application order

    def hidden_now(path: Path) -> bool:
        state = False
        depth = -1
        for done, is_hidden in applied:
            if _inside(path, done) and len(done.parts) >= depth:
                depth, state = len(done.parts), is_hidden
        return state

    def cover_of(path: Path) -> Path:
        """The applied cover that hides `path` (the deepest hidden entry above it)."""
        return max((d for d, h in applied if h and _inside(path, d)), key=lambda d: len(d.parts))

    fds: dict[Path, int] = {}
    ops: list[str] = []
    bound: set[Path] = set()
    for _, kind, path in events:
        if kind == 0:
            if not hidden_now(path):
                if path in private:
                    ops.append(f"t:{SCRATCH_SIZE}:{path}")
                else:
                    ops.append(f"{'d' if path.is_dir() else 'f'}:{path}")
                applied.append((path, True))
        elif hidden_now(path):
            cover = cover_of(path)
            if cover not in fds:
                if len(fds) >= _MAX_OPEN_DIRS:
                    raise ValueError("too many covered directories with something to show")
                fds[cover] = 3 + len(fds)
            rel = path.relative_to(cover).as_posix()
            ops.append(f"{'b' if path.is_dir() else 'B'}:{fds[cover]}:{rel}")
            if path in frozen:
                ops.append(f"R:{path}")
            bound.add(path)
            applied.append((path, False))
    opens = [f"o:{fd}:{cover}" for cover, fd in fds.items()]
    # A tmpfs with something bound exactly onto it is no longer the top mount there.
    seal = [f"r:{op[2:]}" for op in ops if op.startswith("d:") and Path(op[2:]) not in bound]
    return MountPlan(tuple(opens + ops + seal))


def command_env(home: Path, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a command: an allow-list, HOME set to the workspace."""
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if k in SAFE_ENV or k.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = str(home)
    return env


@dataclass(slots=True)
class Sandbox:
    """How `exec` starts commands. `hidden`: Roost's private paths (home, config file,
    database, log files); `mode="off"` runs commands directly (the owner's explicit choice)."""

    hidden: tuple[Path, ...] = ()
    mode: SandboxMode = "auto"
    _tools: dict[str, str] | None = field(default=None, repr=False)
    _ready: set[bool] = field(default_factory=set, repr=False)
    """Which kinds (isolated or not) started once; a success is remembered."""

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def _binaries(self, isolated: bool) -> dict[str, str]:
        if self._tools is None:
            search = os.environ.get("PATH", DEFAULT_PATH) + ":/usr/sbin:/sbin"  # pivot_root
            found = {name: shutil.which(name, path=search) for name in (*_TOOLS, *_ROOT_TOOLS)}
            self._tools = {k: v for k, v in found.items() if v} | {"sh": "/bin/sh"}
        needed = (*_TOOLS, *_ROOT_TOOLS) if isolated else _TOOLS
        missing = [n for n in needed if n not in self._tools]
        if missing:
            raise SandboxUnavailable(f"{', '.join(missing)} not found (util-linux provides "
                                     f"{', '.join(needed)})")
        return self._tools

    def argv(
        self,
        command: str,
        workdir: Path,
        exposed: Sequence[Path] = (),
        *,
        also_hidden: Sequence[Path] = (),
        read_only: Sequence[Path] = (),
        isolated: bool = False,
    ) -> list[str]:
        """The program to start for `command` (run with `sh -c` in `workdir`). A sub scope
        passes its workspace in `also_hidden`, its allow-list in `exposed`, and `isolated`:
        its command starts from an empty root holding only that allow-list and the system
        directories (exec_root.py), with no network."""
        if not self.enabled:
            return ["/bin/sh", "-c", command]
        tools = self._binaries(isolated)
        hidden = [*self.hidden, *also_hidden]
        if isolated:
            show = _resolve([*exposed, workdir])
            ops = plan_root(_resolve(_with_companions(hidden)), show, set(_resolve(read_only)))
            namespaces = ["--net", "--ipc"]
        else:
            ops = plan_mounts(hidden, [*exposed, workdir], read_only, [Path(p) for p in SCRATCH]).ops
            namespaces = []
        return [
            tools["unshare"], "--user", "--map-root-user", "--pid", "--fork", "--kill-child",
            "--mount-proc", "--mount", "--propagation", "private", *namespaces, "--",
            tools["sh"], "-c", SETUP_SCRIPT, "roost-sandbox",
            tools["mount"], tools["setpriv"], tools["sh"], str(workdir),
            tools.get("pivot_root", "-"), tools.get("umount", "-"),
            *ops, "--", command,
        ]

    async def probe(
        self, workdir: Path | None = None, exposed: Sequence[Path] = (), *, isolated: bool = False
    ) -> None:
        """Start `true` exactly as a command would start (`isolated`: as a sub scope's);
        raise SandboxUnavailable with the reason if that fails. A success is remembered."""
        if not self.enabled or isolated in self._ready:
            return
        where = workdir if workdir is not None and workdir.is_dir() else Path("/")
        try:
            argv = self.argv("true", where, [p for p in exposed if p.is_dir()], isolated=isolated)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, cwd=where, env=command_env(where),
            )
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start unshare: {exc}") from exc
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT_S):
                _, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SandboxUnavailable("the namespace set-up did not finish in time") from None
        if proc.returncode != 0:
            reason = " ".join(err.decode("utf-8", "replace").split()) or f"exit status {proc.returncode}"
            raise SandboxUnavailable(_explain(reason))
        self._ready.add(isolated)


_HINTS = {
    "No space left on device": "a namespace limit is 0 or reached (user.max_user_namespaces; for "
                               "commands in groups also user.max_net_namespaces and user.max_ipc_namespaces)",
    "Operation not permitted": "this user may not create user namespaces (a container's seccomp or "
                               "AppArmor profile, or kernel.unprivileged_userns_clone=0)",
    "Permission denied": "creating namespaces or mounts was denied (AppArmor or an LSM policy)",
}


def _explain(reason: str) -> str:
    for needle, hint in _HINTS.items():
        if needle in reason:
            return f"{reason} — {hint}"
    return reason


UNAVAILABLE_FIX = (
    "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and "
    "user.max_user_namespaces > 0; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0; "
    "in Docker run with --security-opt seccomp=unconfined --security-opt apparmor=unconfined), "
    "or set ROOST_AGENT__EXEC_SANDBOX=off to run commands unsandboxed (they can then read "
    "Roost's secrets)"
)
ISOLATED_FIX = (
    "allow network and IPC namespaces for this user (sysctl user.max_net_namespaces > 0 and "
    "user.max_ipc_namespaces > 0; in Docker also --security-opt seccomp=unconfined); until then "
    "exec works only in the owner's private chat"
)

"""What a command sees of the machine, by scope (issue 16, "Isolation").

Reproduced before: in a group where the owner enabled exec, a command read and appended to
an owner's file outside the workspace, read what the owner's own command left in `/tmp`, and
could reach services on the host's loopback (Roost's webhook port, a local PostgreSQL).

The invariant: a sub scope's command starts from an empty root holding only
    /usr /bin /sbin /lib* (read-only), an allow-list of /etc (read-only, plus a passwd,
    group and hosts of its own), /dev (null zero full random urandom, fd links, a private
    shm), a fresh /proc, a private /tmp, and the group's own allow-list from
    `workspace.access` (identity files, skills and its logs read-only; its folder and
    shared roots writable)
and runs in a network namespace of its own (nothing but its own loopback, down). The
owner's chat (main) keeps its view of the machine and the host's network, but /tmp,
/var/tmp and /dev/shm are private to each command.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core.approvals import Decision
from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
from agent_core.builtin_tools.sandbox import Sandbox
from agent_core.risk import Scope
from agent_core.events import ApprovalRequested
from agent_core.tools import ToolContext
from tests.app_harness import OWNER_ID, running_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.anthropic_script import ToolUse, reply_text, reply_tools, user_blocks
from tests.fakes.recording_adapter import group
from tests.test_cli import env_for
from workspace.daily_log import log_dir_for, session_dir_for

ROOT = Path(__file__).parent.parent
GROUP = "group:telegram:-100"
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("alternatives", "ca-certificates", "ssl/certs", "ssl/openssl.cnf", "ld.so.cache", "ld.so.conf",
       "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "host.conf", "gai.conf", "protocols",
       "services", "mime.types", "os-release", "debian_version", "locale.alias", "magic", "magic.mime",
       "inputrc", "terminfo", "fonts", "perl", "python3", "python3.*")
"""Read-only in a group command's view; /etc also gets a passwd, group and hosts of its own.
Never: shadow, machine-id, hostname, ssh keys, ssl/private, sudoers, anything of Roost's."""


def no_net_namespaces(*argv: str) -> list[str]:
    """Run argv where user namespaces work but network namespaces cannot be created."""
    script = 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", *argv]


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder standing for the owner's home: outside the workspace and outside /tmp (so
    a private /tmp alone would not hide it)."""
    with tempfile.TemporaryDirectory(dir=_not_scratch(), prefix=".test-owner-home-") as name:
        yield Path(name)


def _not_scratch() -> Path:
    """The checkout, unless it lives under a folder every command gets privately (a clone in
    /tmp: CI's folder is not ours to choose); then the user's home, then /var/lib."""
    private = [Path(p).resolve() for p in ("/tmp", "/var/tmp", "/dev/shm")]
    for candidate in (ROOT, Path.home(), Path("/var/lib")):
        place = candidate.resolve()
        if not any(place == p or p in place.parents for p in private) and os.access(place, os.W_OK):
            return place
    pytest.skip("no writable folder outside /tmp, /var/tmp and /dev/shm to stand for the owner's home")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel, text in {"SOUL.md": "soul", "USER.md": "PRIVATE-user", "skills/s/SKILL.md": "skill",
                      f"{session_dir_for(GROUP)}/mine.txt": "own-file"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    (root / log_dir_for(GROUP)).mkdir(parents=True, exist_ok=True)
    return root


def main_ctx(ws: Path) -> ToolContext:
    return ToolContext(session_key="main", scope=Scope.MAIN, workspace=ws)


def group_ctx(ws: Path, *roots: str) -> ToolContext:
    return ToolContext(session_key=GROUP, scope=Scope.SUB, workspace=ws, extra_roots=roots)


async def sh(ctx: ToolContext, command: str, sandbox: Sandbox | None = None) -> str:
    return await make_exec_tool(sandbox=sandbox).func(ExecInput(command=command), ctx)


def stdout(result: str) -> str:
    return result.split("--- stdout ---\n", 1)[1].split("\n--- stderr ---", 1)[0] if "--- stdout ---" in result else ""


async def test_tmp_left_by_the_owner_or_a_main_command_is_invisible_to_later_commands(ws: Path) -> None:
    mark = uuid.uuid4().hex
    owner_file = Path("/tmp") / f"roost-owner-{mark}.txt"
    owner_file.write_text("PRIVATE-owner-tmp\n")
    try:
        made = await sh(main_ctx(ws), f"echo PRIVATE-main-tmp > /tmp/roost-main-{mark}.txt; "
                                      f"echo PRIVATE-main-shm > /dev/shm/roost-main-{mark}; "
                                      f"cat /tmp/roost-main-{mark}.txt /tmp/roost-owner-{mark}.txt")
        # A command may use its /tmp; it never sees the owner's.
        assert "PRIVATE-main-tmp" in made and "PRIVATE-owner-tmp" not in made
        assert not (Path("/tmp") / f"roost-main-{mark}.txt").exists()  # nothing left on the host
        assert not (Path("/dev/shm") / f"roost-main-{mark}").exists()
        look = f"ls -a /tmp /dev/shm; cat /tmp/roost-*-{mark}.txt /dev/shm/roost-main-{mark}; echo looked"
        later_main = await sh(main_ctx(ws), look)
        in_group = await sh(group_ctx(ws), look)
    finally:  # what a command wrongly left on the host goes too
        for left in (owner_file, Path("/tmp") / f"roost-main-{mark}.txt", Path("/dev/shm") / f"roost-main-{mark}"):
            left.unlink(missing_ok=True)
    for out in (later_main, in_group):
        assert "looked" in out and "PRIVATE" not in out and mark not in stdout(out), out


async def test_a_group_command_cannot_read_or_append_to_an_owner_file_outside_the_workspace(
    ws: Path, outside: Path
) -> None:
    for place in (outside, ws.parent):  # outside /tmp, and beside the workspace in /tmp
        (place / ".bashrc").write_text("PRIVATE-owner-rc\n")
    command = "; ".join(f'cat "{p}/.bashrc"; echo APPENDED >> "{p}/.bashrc"; ls -a "{p}"'
                        for p in (outside, ws.parent)) + "; echo tried"
    out = await sh(group_ctx(ws), command + " 2>&1")
    assert "tried" in out and "PRIVATE" not in out, out
    for place in (outside, ws.parent):
        assert (place / ".bashrc").read_text() == "PRIVATE-owner-rc\n"
    # The owner's chat keeps its view of the machine (only its /tmp is private).
    mine = await sh(main_ctx(ws), f'cat "{outside}/.bashrc"')
    assert "PRIVATE-owner-rc" in mine


async def test_a_group_command_cannot_reach_a_loopback_service(ws: Path) -> None:
    """Stands for Roost's own webhook port or a local PostgreSQL. Main keeps the host's
    network (the owner's commands need it: package installs, git, local services)."""
    reached: list[str] = []
    got = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reached.append((await reader.read(100)).decode())
        writer.close()
        got.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = ("python3 -c \"import socket,sys\n"
             "try:\n"
             f"  s=socket.create_connection(('127.0.0.1',{port}),timeout=5)\n"
             "  s.sendall(sys.argv[1].encode()); s.close(); print('CONNECTED')\n"
             "except OSError as e: print('REFUSED', e)\" ")
    async with server:
        group = await sh(group_ctx(ws), probe + "group")
        main = await sh(main_ctx(ws), probe + "main")
        await asyncio.wait_for(got.wait(), 10)  # the server task records main's bytes
    assert "REFUSED" in group and "CONNECTED" not in group, group
    assert "CONNECTED" in main, main
    assert reached == ["main"]


async def test_a_group_command_still_works_in_its_own_folder(ws: Path) -> None:
    own = ws / session_dir_for(GROUP)
    out = await sh(group_ctx(ws), "cat mine.txt; echo made > new.txt; ls; /bin/sh -c 'echo sh-ok'; "
                                  "python3 -c 'import json, ssl, sqlite3; print(\"py-ok\")'; "
                                  "echo scratch > /tmp/x && cat /tmp/x; date +%Y >/dev/null && echo date-ok; "
                                  "whoami; head -c 4 /dev/urandom | wc -c")
    assert out.startswith("exit code: 0"), out
    for seen in ("own-file", "mine.txt", "sh-ok", "py-ok", "scratch", "date-ok", "root", "4"):
        assert seen in out, out
    assert (own / "new.txt").read_text() == "made\n"


def _allowed_mounts(ws: Path, roots: tuple[str, ...]) -> set[str]:
    """Every place something may be mounted in a group command's view (the invariant)."""
    sub = ws.resolve()
    allowed = {"/", "/tmp", "/proc", "/dev", "/dev/shm"}
    allowed |= {p for p in SYSTEM if Path(p).is_dir() and not Path(p).is_symlink()}
    allowed |= {str(path) for name in ETC for path in Path("/etc").glob(name)}
    allowed |= {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")}
    allowed |= {str(sub / n) for n in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "skills",
                                       log_dir_for(GROUP), session_dir_for(GROUP))}
    allowed |= {str(sub / r) for r in roots}
    return allowed


async def test_a_group_command_sees_only_the_allow_list(ws: Path, outside: Path) -> None:
    """Every mount in the command's view is on the allow-list; the root holds nothing else;
    nothing sensitive of /etc is there; and none of main's files reach it."""
    (ws / "shared/team").mkdir(parents=True)
    (ws / "shared/team/doc.md").write_text("shared\n")
    await sh(main_ctx(ws), "echo PRIVATE-main-wrote > notes.md; echo PRIVATE-main-tmp > /tmp/main.txt")
    out = await sh(group_ctx(ws, "shared/team"),
                   "cat /proc/self/mountinfo; echo '== root'; ls -a / /etc; echo '== read'; "
                   f"cat /etc/shadow /etc/hostname /etc/machine-id \"{ws}/notes.md\" \"{ws}/USER.md\" "
                   "/tmp/main.txt 2>&1; echo end; "
                   "grep -rsI --exclude-dir=proc --exclude-dir=dev --exclude-dir=usr PRIVATE /")
    assert "end" in out and "PRIVATE" not in out, out
    text = stdout(out)
    mounts = {line.split()[4].replace("\\040", " ") for line in text.split("== root")[0].splitlines()
              if re.match(r"^\d+ \d+ ", line)}
    allowed = _allowed_mounts(ws, ("shared/team",))
    assert mounts and mounts <= allowed, sorted(mounts - allowed)
    top = text.split("== root")[1].split("== read")[0]
    for absent in ("home", "root", "var", "opt", "srv", "mnt", "work", "shadow", "machine-id", "hostname", "sudoers"):
        assert not re.search(rf"^{absent}$", top, re.M), (absent, top)
    assert str(outside) not in text


def test_where_network_namespaces_are_refused_group_exec_refuses_and_doctor_says_so(tmp_path: Path) -> None:
    """A group command never runs with the host's network: if no network namespace can be
    made, exec refuses there (main keeps working) and `roost doctor` names the cause."""
    ws = tmp_path / "ws"
    (ws / session_dir_for(GROUP)).mkdir(parents=True)
    snippet = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
        from agent_core.risk import Scope
        from agent_core.tools import ToolContext, ToolError

        async def main():
            ws = Path({str(ws)!r})
            tool = make_exec_tool()
            print(await tool.func(ExecInput(command="echo main-ran"), ToolContext("main", Scope.MAIN, ws)))
            try:
                print(await tool.func(ExecInput(command="echo ran > ran.txt"), ToolContext({GROUP!r}, Scope.SUB, ws)))
            except ToolError as exc:
                print("REFUSED:", exc)

        asyncio.run(main())
    """)
    result = subprocess.run(no_net_namespaces(sys.executable, "-c", snippet), cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "main-ran" in result.stdout
    refusal = next(line for line in result.stdout.splitlines() if line.startswith("REFUSED"))
    assert "network" in refusal and "max_net_namespaces" in refusal, refusal
    assert not list(ws.rglob("ran.txt"))
    doctor = subprocess.run(no_net_namespaces(sys.executable, "-m", "bot.cli", "doctor"), cwd=ROOT,
                            env=env_for(tmp_path / "home"), capture_output=True, text=True, timeout=60)
    line = next(x for x in doctor.stdout.splitlines() if "exec sandbox" in x)
    assert line.startswith("! exec sandbox") and "refused in groups" in line, doctor.stdout
    assert "max_net_namespaces" in doctor.stdout


async def test_a_private_path_inside_a_shared_folder_stays_covered_in_a_group(ws: Path) -> None:
    """Roost's private paths (here an ROOST_AGENT__EXEC_HIDE file) stay covered wherever
    they fall inside what the empty root shows."""
    (ws / "shared/team").mkdir(parents=True)
    (ws / "shared/team/doc.md").write_text("shared\n")
    (ws / "shared/team/secret.env").write_text("PRIVATE-token\n")
    box = Sandbox(hidden=(ws / "shared/team/secret.env",))
    out = await sh(group_ctx(ws, "shared/team"), f'cat "{ws}/shared/team/doc.md" "{ws}/shared/team/secret.env"; '
                                                 f'echo x >> "{ws}/shared/team/secret.env"; echo end', box)
    assert "shared" in out and "end" in out and "PRIVATE" not in out, out
    assert (ws / "shared/team/secret.env").read_text() == "PRIVATE-token\n"


async def test_a_group_command_cannot_see_the_hosts_shared_memory_segments(ws: Path) -> None:
    """System V IPC (shared memory a database or another program of the owner made) is the
    host's in main, and a namespace of its own in a group."""
    made = subprocess.run(["ipcmk", "-M", "4096"], capture_output=True, text=True, check=True).stdout
    shm_id = made.split()[-1]
    try:
        group = await sh(group_ctx(ws), "ipcs -m; echo listed")
        main = await sh(main_ctx(ws), "ipcs -m")
    finally:
        subprocess.run(["ipcrm", "-m", shm_id], check=True)
    assert "listed" in group and not re.search(rf"\b{shm_id}\b", stdout(group)), group
    assert re.search(rf"\b{shm_id}\b", stdout(main)), main


async def test_in_the_app_a_group_command_the_owner_approved_sees_none_of_the_owners_machine(
    tmp_path: Path, fake_api: FakeAnthropic, outside: Path
) -> None:
    """End to end through `bot.app.build`: a member of a group where the owner enabled exec
    gets a command approved that goes for the owner's files, the owner's /tmp and a
    loopback service; the tool result the model gets back holds none of them."""
    mark = uuid.uuid4().hex
    owner_tmp = Path("/tmp") / f"roost-owner-{mark}.txt"
    owner_tmp.write_text("PRIVATE-owner-tmp\n")
    (outside / ".bashrc").write_text("PRIVATE-owner-rc\n")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    command = (f'cat /tmp/roost-owner-{mark}.txt "{outside}/.bashrc"; echo pwned >> "{outside}/.bashrc"; '
               f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
               "print('PRIVATE-connected')\"; echo RAN")
    fake_api.script(reply_tools(ToolUse("exec", {"command": command + " 2>&1"})), reply_text("done"))
    try:
        enabled = {"groups": {"telegram:-100": {"exec": "ask"}}}  # the owner enabled exec there
        async with running_app(tmp_path, fake_api, policy=enabled) as (app, adapter):
            await adapter.say(group(-100, 42, "@roost run the report"))

            def asked() -> ApprovalRequested | None:
                events = (e for r in adapter.replies for e in r.events)
                return next((e for e in events if isinstance(e, ApprovalRequested)), None)

            await adapter.wait_for(asked, timeout=30)
            event = asked()
            assert event is not None
            await app.gate.resolve(event.approval_id, Decision.ONCE, f"telegram:{OWNER_ID}")
            await adapter.wait_for(lambda: any(r.closed for r in adapter.replies), timeout=30)
    finally:
        owner_tmp.unlink()
        listener.close()
    content = user_blocks(fake_api.requests[1].json)
    (result,) = [b for b in content if b["type"] == "tool_result"]
    text = json.dumps(result["content"])
    assert "RAN" in text and "PRIVATE" not in text, text
    assert (outside / ".bashrc").read_text() == "PRIVATE-owner-rc\n"

"""The exec sandbox: what it covers and binds back, and that it refuses — never silently
runs unsandboxed — on a machine where namespaces cannot be created."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from agent_core.builtin_tools.sandbox import Sandbox, plan_mounts
from tests.test_cli import env_for
from tests.test_tools_exec import run

ROOT = Path(__file__).parent.parent


def no_user_namespaces(*argv: str) -> list[str]:
    """Run argv where creating a user namespace fails, like a locked-down container: inside
    a user namespace of its own whose limit for nested ones is set to zero."""
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", *argv]


def test_the_workspace_stays_visible_inside_a_hidden_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    for name in ("roost.toml", "roost.db", "roost.db-wal"):
        (home / name).write_text("x")
    (workspace / "private.toml").write_text("x")
    plan = plan_mounts([home, home / "roost.toml", home / "roost.db", workspace / "private.toml",
                        tmp_path / "missing"], [workspace])
    assert plan.ops == (
        f"o:3:{home}",  # opened before anything is covered
        f"d:{home}",  # roost.toml, roost.db and its -wal go with it
        f"b:3:workspace",  # from the home opened before the cover
        f"f:{workspace / 'private.toml'}",  # inside the workspace: covered after the bind
        f"r:{home}",
    )


async def test_a_hidden_file_inside_the_workspace_reads_empty(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("visible\n")
    (tmp_path / "roost.toml").write_text("SECRET-in-workspace\n")
    from agent_core.builtin_tools.exec_tool import make_exec_tool

    tool = make_exec_tool(sandbox=Sandbox(hidden=(tmp_path / "roost.toml",)))
    out = await run(tool, tmp_path, "cat notes.txt roost.toml; echo end")
    assert out == "exit code: 0\n--- stdout ---\nvisible\nend"


def test_exec_refuses_where_namespaces_cannot_be_created(tmp_path: Path) -> None:
    snippet = textwrap.dedent(f"""
        import asyncio
        from pathlib import Path
        from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
        from agent_core.builtin_tools.sandbox import Sandbox
        from agent_core.risk import Scope
        from agent_core.tools import ToolContext, ToolError

        async def main():
            ctx = ToolContext(session_key="main", scope=Scope.MAIN, workspace=Path({str(tmp_path)!r}))
            try:
                print(await make_exec_tool().func(ExecInput(command="echo ran > sandboxed.txt"), ctx))
            except ToolError as exc:
                print("REFUSED:", exc)
            off = make_exec_tool(sandbox=Sandbox(mode="off"))
            print(await off.func(ExecInput(command="echo ran > unsandboxed.txt"), ctx))

        asyncio.run(main())
    """)
    result = subprocess.run(no_user_namespaces(sys.executable, "-c", snippet), cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    refusal = result.stdout.splitlines()[0]
    assert refusal.startswith("REFUSED: exec is unavailable on this machine")
    assert "max_user_namespaces" in refusal and "ROOST_AGENT__EXEC_SANDBOX=off" in refusal
    assert not (tmp_path / "sandboxed.txt").exists()
    assert (tmp_path / "unsandboxed.txt").read_text() == "ran\n"  # the owner's explicit opt-out


def test_doctor_reports_the_exec_sandbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    roost = [sys.executable, "-m", "bot.cli", "doctor"]
    ok = subprocess.run(roost, env=env_for(home), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert re.search(r"^✓ exec sandbox +commands run in their own user, PID and mount namespaces", ok.stdout, re.M)
    blocked = subprocess.run(no_user_namespaces(*roost), env=env_for(home), cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert re.search(r"^! exec sandbox +unavailable, so exec refuses to run commands", blocked.stdout, re.M)
    assert "fix: allow unprivileged user namespaces" in blocked.stdout
    off = subprocess.run(roost, env=env_for(home, ROOST_AGENT__EXEC_SANDBOX="off"), cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert re.search(r"^! exec sandbox +off \(ROOST_AGENT__EXEC_SANDBOX=off\)", off.stdout, re.M)
    assert not home.exists()  # doctor creates nothing


async def test_a_group_command_sees_only_its_allow_list(tmp_path: Path) -> None:
    """The privacy invariant holds for exec too: where the owner enabled it for a group,
    the command sees what the group's file tools see, nothing the main session wrote."""
    from agent_core.builtin_tools.exec_tool import ExecInput, make_exec_tool
    from agent_core.risk import Scope
    from agent_core.tools import ToolContext
    from workspace.daily_log import log_dir_for, session_dir_for

    key = "group:telegram:-100"
    ws = tmp_path / "ws"
    own, logs = ws / session_dir_for(key), ws / log_dir_for(key)
    files = {
        "SOUL.md": "soul-visible", "USER.md": "PRIVATE-user", "MEMORY.md": "PRIVATE-memory",
        "notes/health.md": "PRIVATE-diagnosis", "memory/2026-01-01.md": "PRIVATE-main-log",
        "skills/s/SKILL.md": "skill-visible", f"{log_dir_for(key)}/2026-01-01.md": "group-log-visible",
        f"{session_dir_for(key)}/mine.txt": "own-visible", "groups/other/x.md": "PRIVATE-other-group",
        "shared/team/doc.md": "shared-visible",
    }
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text + "\n")
    (own / "link.md").symlink_to(ws / "USER.md")
    ctx = ToolContext(session_key=key, scope=Scope.SUB, workspace=ws, extra_roots=("shared/team",))
    command = (f'pwd; find "{ws}" -type f | sort | xargs cat; cat link.md "{ws}/USER.md"; '
               f'echo made > new.txt; echo changed > "{ws}/SOUL.md"; echo added > "{ws}/shared/team/new.txt"; '
               f'echo log > "{logs}/2026-01-02.md"; echo done')
    out = await make_exec_tool().func(ExecInput(command=command), ctx)
    assert "PRIVATE" not in out, out
    for visible in ("soul-visible", "skill-visible", "group-log-visible", "own-visible", "shared-visible", "done"):
        assert visible in out
    assert f"--- stdout ---\n{own}\n" in out  # commands start in the group's own folder
    assert (own / "new.txt").read_text() == "made\n" and (ws / "shared/team/new.txt").read_text() == "added\n"
    assert (ws / "SOUL.md").read_text() == "soul-visible\n"  # identity files are read-only
    assert not (logs / "2026-01-02.md").exists()  # so are its logs

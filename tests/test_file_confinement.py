"""File confinement and the sub-scope allow-list, attacked through the real file, memory and
skill tools: `..`, absolute paths, symlinks, hard links, case and Unicode look-alikes, and
machine paths in error messages (errors are shown in groups)."""

from __future__ import annotations

import asyncio
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent_core.builtin_tools.files import EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from agent_core.builtin_tools.memory_tools import MEMORY_GET, MEMORY_WRITE
from agent_core.builtin_tools.skills_tool import LOAD_SKILL
from agent_core.risk import Scope
from agent_core.tools import Tool, ToolContext, ToolError
from workspace.access import check_extra_root, skeleton
from workspace.bootstrap import ensure_workspace
from workspace.daily_log import log_path

GROUP = "group:telegram:-100123"
TOPIC = "group:telegram:-100123:7"
DM = "dm:telegram:42"
SUBS = [GROUP, TOPIC, DM]
OWN = {GROUP: "groups/telegram_-100123", TOPIC: "groups/telegram_-100123_7", DM: "dms/telegram_42"}
LOGS = {key: "memory/" + own for key, own in OWN.items()}

CANARY_USER = "CANARY-USER-a1"
CANARY_MEMORY = "CANARY-MEMORY-b2"
CANARY_HEALTH = "CANARY-HEALTH-c3"
CANARY_MAIN_LOG = "CANARY-MAINLOG-d4"
CANARY_OTHER = "CANARY-OTHER-GROUP-e5"
CANARY_OUTSIDE = "CANARY-OUTSIDE-f6"
CANARIES = (CANARY_USER, CANARY_MEMORY, CANARY_HEALTH, CANARY_MAIN_LOG, CANARY_OTHER, CANARY_OUTSIDE)


def ctx(root: Path, key: str = "main", extra_roots: tuple[str, ...] = ()) -> ToolContext:
    scope = Scope.MAIN if key == "main" else Scope.SUB
    return ToolContext(session_key=key, scope=scope, workspace=root, extra_roots=extra_roots)


async def call(tool: Tool[Any], context: ToolContext, **kwargs: Any) -> str:
    return await tool.func(tool.input_model(**kwargs), context)


async def refused(tool: Tool[Any], context: ToolContext, match: str = "", **kwargs: Any) -> str:
    """The tool's error message; fails if the tool succeeded."""
    with pytest.raises(ToolError, match=match) as info:
        await call(tool, context, **kwargs)
    return str(info.value)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    ensure_workspace(root)
    (root / "USER.md").write_text(f"# User\n{CANARY_USER}\n", encoding="utf-8")
    (root / "MEMORY.md").write_text(f"# Memory\n{CANARY_MEMORY}\n", encoding="utf-8")
    (root / "memory/2025-01-01.md").write_text(f"# Log\n{CANARY_MAIN_LOG}\n", encoding="utf-8")
    (root / "groups/other").mkdir(parents=True)
    (root / "groups/other/plan.md").write_text(CANARY_OTHER, encoding="utf-8")
    for key in SUBS:
        (root / OWN[key]).mkdir(parents=True, exist_ok=True)
        (root / OWN[key] / "own.md").write_text(f"own file of {key}", encoding="utf-8")
        (root / LOGS[key]).mkdir(parents=True, exist_ok=True)
        (root / LOGS[key] / "2025-01-01.md").write_text(f"log of {key}", encoding="utf-8")
    (root / "skills/weather").mkdir(parents=True, exist_ok=True)
    (root / "skills/weather/SKILL.md").write_text(
        "---\nname: weather\ndescription: forecast\n---\nuse wttr.in\n", encoding="utf-8"
    )
    (tmp_path / "outside.txt").write_text(CANARY_OUTSIDE, encoding="utf-8")
    return root


def no_canary(text: str) -> None:
    for canary in CANARIES:
        assert canary not in text, f"{canary} leaked: {text!r}"


# --- the allow-list ---------------------------------------------------------------------


@pytest.mark.parametrize("key", SUBS)
async def test_note_written_by_main_is_invisible_to_a_group_member(ws: Path, key: str) -> None:
    """The reproduced hole: 'note my diagnosis' → main writes notes/health.md → a group
    member's mention lists the workspace and reads it back."""
    await call(WRITE_FILE, ctx(ws), path="notes/health.md", content=f"diagnosis: {CANARY_HEALTH}")
    sub = ctx(ws, key)
    top = await call(LIST_DIR, sub)
    assert "notes" not in top
    await refused(LIST_DIR, sub, "not available in this chat", path="notes")
    await refused(READ_FILE, sub, "not available in this chat", path="notes/health.md")
    await refused(EDIT_FILE, sub, "not available", path="notes/health.md", old_string="d", new_string="x")
    assert CANARY_HEALTH in await call(READ_FILE, ctx(ws), path="notes/health.md")


@pytest.mark.parametrize("key", SUBS)
async def test_sub_scope_root_listing_shows_only_the_allow_list(ws: Path, key: str) -> None:
    (ws / "notes").mkdir()
    (ws / "todo.txt").write_text("owner's todo", encoding="utf-8")
    top = await call(LIST_DIR, ctx(ws, key))
    names = {line.split()[0] for line in top.splitlines()[1:]}
    area = OWN[key].split("/")[0] + "/"
    assert names == {"AGENTS.md", "IDENTITY.md", "SOUL.md", "skills/", "memory/", area}
    assert (await call(LIST_DIR, ctx(ws, key), path=area)).splitlines()[1:] == [
        OWN[key].split("/")[1] + "/"
    ]
    memory = await call(LIST_DIR, ctx(ws, key), path="memory")
    assert memory.splitlines()[1:] == [area]
    own_logs = await call(LIST_DIR, ctx(ws, key), path=LOGS[key])
    assert "2025-01-01.md" in own_logs
    main_top = await call(LIST_DIR, ctx(ws))
    assert "USER.md" in main_top and "notes/" in main_top and "todo.txt" in main_top


@pytest.mark.parametrize("key", SUBS)
async def test_sub_scope_reads_identity_skills_own_folder_and_own_logs(ws: Path, key: str) -> None:
    sub = ctx(ws, key)
    assert "Soul" in await call(READ_FILE, sub, path="SOUL.md")
    assert "use wttr.in" in await call(READ_FILE, sub, path="skills/weather/SKILL.md")
    assert await call(READ_FILE, sub, path=f"{OWN[key]}/own.md") == f"own file of {key}"
    assert f"log of {key}" in await call(MEMORY_GET, sub, path=f"{LOGS[key]}/2025-01-01.md")
    out = await call(WRITE_FILE, sub, path=f"{OWN[key]}/new/list.md", content="milk")
    assert out.startswith(f"created {OWN[key]}/new/list.md")


@pytest.mark.parametrize("key", SUBS)
async def test_sub_scope_cannot_rewrite_identity_skills_or_its_logs(ws: Path, key: str) -> None:
    """A group that may write (per-group policy) still cannot change what main's prompt is made
    of, nor forge its own log."""
    sub = ctx(ws, key)
    before = (ws / "SOUL.md").read_bytes()
    await refused(WRITE_FILE, sub, "read-only in this chat", path="SOUL.md", content="obey me")
    await refused(EDIT_FILE, sub, "read-only", path="AGENTS.md", old_string="#", new_string="!")
    await refused(WRITE_FILE, sub, "read-only", path="skills/evil/SKILL.md", content="x")
    await refused(WRITE_FILE, sub, "read-only", path=f"{LOGS[key]}/2025-01-01.md", content="x")
    assert (ws / "SOUL.md").read_bytes() == before and not (ws / "skills/evil").exists()


@pytest.mark.parametrize("key", SUBS)
async def test_other_sessions_folders_and_logs_are_private(ws: Path, key: str) -> None:
    sub = ctx(ws, key)
    others = [k for k in SUBS if k != key]
    for other in others:
        await refused(READ_FILE, sub, "not available", path=f"{OWN[other]}/own.md")
        await refused(LIST_DIR, sub, "not available", path=OWN[other])
        await refused(MEMORY_GET, sub, "not available", path=f"{LOGS[other]}/2025-01-01.md")
    await refused(READ_FILE, sub, "not available", path="groups/other/plan.md")
    await refused(WRITE_FILE, sub, "not available", path=f"{OWN[others[0]]}/x.md", content="x")
    for path in ("MEMORY.md", "memory/2025-01-01.md", "USER.md"):
        await refused(MEMORY_GET, sub, "not available", path=path)


async def test_extra_roots_shared_by_the_owner_are_honoured(ws: Path) -> None:
    (ws / "shared/team").mkdir(parents=True)
    (ws / "shared/team/plan.md").write_text("team plan", encoding="utf-8")
    (ws / "shared/owner-only.md").write_text(CANARY_HEALTH, encoding="utf-8")
    sub = ctx(ws, GROUP, extra_roots=("shared/team",))
    assert await call(READ_FILE, sub, path="shared/team/plan.md") == "team plan"
    assert await call(LIST_DIR, sub, path="shared") == "shared/ (1 entries)\nteam/"
    assert "shared/" in await call(LIST_DIR, sub)
    await call(WRITE_FILE, sub, path="shared/team/notes.md", content="from the group")
    await refused(READ_FILE, sub, "not available", path="shared/owner-only.md")
    await refused(READ_FILE, sub, "not available", path="shared/team/../owner-only.md")
    await refused(READ_FILE, ctx(ws, DM), "not available", path="shared/team/plan.md")


@pytest.mark.parametrize(
    "root", [".", "", "..", "../x", "/etc", "~/x", "shared/../..", "memory", "memory/groups/x",
             "groups/other", "dms", "USER.md", "notes/MEMORY.md", "ｍemory", "sha\u200bred",
             "Cafe\u0301"]
)
def test_unsafe_extra_roots_are_rejected(ws: Path, root: str) -> None:
    with pytest.raises(ValueError):
        check_extra_root(root)


async def test_unsafe_extra_roots_in_a_context_are_ignored(ws: Path) -> None:
    sub = ctx(ws, GROUP, extra_roots=(".", "memory", "../", "notes"))
    (ws / "notes").mkdir()
    (ws / "notes/shared.md").write_text("shared on purpose", encoding="utf-8")
    await refused(READ_FILE, sub, "not available", path="USER.md")
    await refused(READ_FILE, sub, "not available", path="memory/2025-01-01.md")
    assert await call(READ_FILE, sub, path="notes/shared.md") == "shared on purpose"


# --- escapes: .., absolute paths, symlinks, hard links -----------------------------------


@pytest.mark.parametrize("key", ["main", *SUBS])
@pytest.mark.parametrize(
    "path", ["../outside.txt", "../../etc/passwd", "/etc/passwd", "skills/../../outside.txt", "~/x"]
)
@pytest.mark.parametrize("tool", [READ_FILE, WRITE_FILE, LIST_DIR, MEMORY_GET])
async def test_dot_dot_and_absolute_paths_never_leave_the_workspace(
    ws: Path, key: str, path: str, tool: Tool[Any]
) -> None:
    kwargs: dict[str, Any] = {"path": path}
    if tool is WRITE_FILE:
        kwargs["content"] = "pwned"
    await refused(tool, ctx(ws, key), "outside the workspace", **kwargs)
    assert (ws.parent / "outside.txt").read_text(encoding="utf-8") == CANARY_OUTSIDE


@pytest.mark.parametrize("key", SUBS)
async def test_absolute_path_to_a_private_file_inside_the_workspace_is_refused(
    ws: Path, key: str
) -> None:
    message = await refused(READ_FILE, ctx(ws, key), "not available", path=str(ws / "USER.md"))
    assert str(ws) not in message
    assert "Soul" in await call(READ_FILE, ctx(ws, key), path=str(ws / "SOUL.md"))


@pytest.mark.parametrize("key", ["main", *SUBS])
async def test_symlink_out_of_the_workspace_is_refused(ws: Path, key: str) -> None:
    where = ws / (OWN[key] if key != "main" else "notes")
    where.mkdir(parents=True, exist_ok=True)
    (where / "link.txt").symlink_to(ws.parent / "outside.txt")
    (where / "linkdir").symlink_to(ws.parent)
    rel = where.relative_to(ws).as_posix()
    sub = ctx(ws, key)
    await refused(READ_FILE, sub, "outside the workspace", path=f"{rel}/link.txt")
    await refused(LIST_DIR, sub, "outside the workspace", path=f"{rel}/linkdir")
    await refused(WRITE_FILE, sub, "outside the workspace", path=f"{rel}/linkdir/outside.txt", content="x")
    listing = await call(LIST_DIR, sub, path=rel)
    no_canary(listing)
    assert str(ws.parent) not in listing and "->" not in listing
    if key == "main":
        assert "link.txt@ (link)" in listing and "linkdir@/ (link)" in listing
    else:
        assert "link.txt" not in listing and "linkdir" not in listing
    assert (ws.parent / "outside.txt").read_text(encoding="utf-8") == CANARY_OUTSIDE


@pytest.mark.parametrize("key", SUBS)
async def test_symlink_from_the_own_folder_to_a_private_file_is_refused(ws: Path, key: str) -> None:
    (ws / "notes").mkdir()
    (ws / "notes/health.md").write_text(CANARY_HEALTH, encoding="utf-8")
    own = ws / OWN[key]
    (own / "health.md").symlink_to(ws / "notes/health.md")
    (own / "mem.md").symlink_to("../../MEMORY.md")
    (own / "notes").symlink_to(ws / "notes")
    (own / "logs").symlink_to(ws / "memory")
    sub = ctx(ws, key)
    for path in ("health.md", "mem.md", "notes/health.md", "logs/2025-01-01.md"):
        await refused(READ_FILE, sub, "not available", path=f"{OWN[key]}/{path}")
    await refused(LIST_DIR, sub, "not available", path=f"{OWN[key]}/notes")
    await refused(WRITE_FILE, sub, "not available", path=f"{OWN[key]}/mem.md", content="x")
    listing = await call(LIST_DIR, sub, path=OWN[key])
    # logs/ leads to memory/, which the scope may list (it holds the way to its own logs)
    own_file = "own.md  (" + str(len(f"own file of {key}")) + " bytes)"
    assert listing.splitlines()[1:] == ["logs@/ (link)", own_file]
    assert (ws / "MEMORY.md").read_text(encoding="utf-8").endswith(f"{CANARY_MEMORY}\n")


async def test_symlink_into_an_allowed_place_still_works(ws: Path) -> None:
    own = ws / OWN[GROUP]
    (own / "soul.md").symlink_to(ws / "SOUL.md")
    assert "Soul" in await call(READ_FILE, ctx(ws, GROUP), path=f"{OWN[GROUP]}/soul.md")


@pytest.mark.parametrize("key", ["main", *SUBS])
async def test_hard_link_to_a_private_or_outside_file_is_refused(ws: Path, key: str) -> None:
    """A hard link is the file it shares; the name it has in an allowed folder says nothing.
    Refused in every scope: in main it may be a file outside the workspace (roost.toml)."""
    where = ws / (OWN[key] if key != "main" else "notes")
    where.mkdir(parents=True, exist_ok=True)
    os.link(ws / "MEMORY.md", where / "memory-copy.txt")
    os.link(ws.parent / "outside.txt", where / "outside-copy.txt")
    rel = where.relative_to(ws).as_posix()
    c = ctx(ws, key)
    for name in ("memory-copy.txt", "outside-copy.txt"):
        await refused(READ_FILE, c, "hard links", path=f"{rel}/{name}")
        await refused(EDIT_FILE, c, "hard links", path=f"{rel}/{name}", old_string="C", new_string="X")
        await refused(WRITE_FILE, c, "hard links", path=f"{rel}/{name}", content="x")
    listing = await call(LIST_DIR, c, path=rel)
    if key != "main":
        assert "copy" not in listing
    assert (ws.parent / "outside.txt").read_text(encoding="utf-8") == CANARY_OUTSIDE
    assert CANARY_MEMORY in (ws / "MEMORY.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("mode", ["append", "replace"])
@pytest.mark.parametrize("link", ["symlink", "hard link"])
async def test_memory_write_never_writes_through_a_link_in_place_of_memory_md(
    ws: Path, link: str, mode: str
) -> None:
    """MEMORY.md swapped for a link to a file outside the workspace: memory_write is refused
    like the file tools are, and the outside file is unchanged (it used to be appended to or
    overwritten through the link)."""
    outside = ws.parent / "outside.txt"
    (ws / "MEMORY.md").unlink()
    if link == "symlink":
        (ws / "MEMORY.md").symlink_to(outside)
    else:
        os.link(outside, ws / "MEMORY.md")
    expected = "outside the workspace" if link == "symlink" else "hard links"
    message = await refused(MEMORY_WRITE, ctx(ws), expected, target="memory", text="pwned", mode=mode)
    assert str(ws.parent) not in message
    assert outside.read_text(encoding="utf-8") == CANARY_OUTSIDE


async def test_memory_write_still_appends_and_replaces_a_plain_memory_md(ws: Path) -> None:
    await call(MEMORY_WRITE, ctx(ws), target="memory", text="likes tea")
    assert (ws / "MEMORY.md").read_text(encoding="utf-8") == f"# Memory\n{CANARY_MEMORY}\n\nlikes tea\n"
    await call(MEMORY_WRITE, ctx(ws), target="memory", text="fresh start", mode="replace")
    assert (ws / "MEMORY.md").read_text(encoding="utf-8") == "fresh start\n"
    (ws / "MEMORY.md").unlink()
    await call(MEMORY_WRITE, ctx(ws), target="memory", text="first note")
    assert (ws / "MEMORY.md").read_text(encoding="utf-8") == "first note\n"


@pytest.mark.parametrize("key", SUBS)
async def test_hard_linked_own_log_is_refused_by_memory_get(ws: Path, key: str) -> None:
    os.link(ws / "memory/2025-01-01.md", ws / LOGS[key] / "2025-01-02.md")
    await refused(MEMORY_GET, ctx(ws, key), "hard links", path=f"{LOGS[key]}/2025-01-02.md")


# --- case and Unicode look-alikes -------------------------------------------------------


LOOK_ALIKES = [
    "memory.MD",
    "Memory.md",
    "user.MD",
    "ＭＥＭＯＲＹ.md",  # fullwidth
    "МЕМОRY.md",  # Cyrillic М, Е, О
    "usеr.md",  # Cyrillic е
    "MEM\u200bORY.md",  # zero-width space
    "MEMORY\u0301.md",  # combining acute (NFD-style decoration)
    "\ufeffUSER.md",  # byte-order mark
    "MEMORY.md\u00a0",  # trailing no-break space
]


@pytest.mark.parametrize("name", LOOK_ALIKES)
def test_look_alike_names_have_the_private_skeleton(name: str) -> None:
    assert skeleton(name) in {"memory.md", "user.md"}


@pytest.mark.parametrize("key", SUBS)
@pytest.mark.parametrize("name", LOOK_ALIKES)
async def test_look_alikes_of_private_names_are_refused_even_in_the_own_folder(
    ws: Path, key: str, name: str
) -> None:
    """On a case-sensitive file system these are other files; on a case-insensitive or
    normalising one they are MEMORY.md itself. Either way a sub scope never gets them."""
    (ws / OWN[key] / name).write_text(CANARY_MEMORY, encoding="utf-8")
    (ws / name).write_text(CANARY_MEMORY, encoding="utf-8")
    sub = ctx(ws, key)
    for path in (name, f"{OWN[key]}/{name}"):
        await refused(READ_FILE, sub, "not available", path=path)
        await refused(WRITE_FILE, sub, "not available", path=path, content="x")
    no_canary(await call(LIST_DIR, sub, path=OWN[key]))
    no_canary(await call(LIST_DIR, sub))


@pytest.mark.parametrize("key", SUBS)
@pytest.mark.parametrize(
    "path", ["soul.md", "Soul.md", "SОUL.md", "SOUL.md\u200b", "ＳＯＵＬ.md", "Skills/weather/SKILL.md",
             "skіlls/weather/SKILL.md", "memоry/2025-01-01.md", "Memory/2025-01-01.md", "MEMORY/x.md"]
)
async def test_look_alikes_of_allowed_names_are_other_files_and_refused(
    ws: Path, key: str, path: str
) -> None:
    """The allow-list matches names exactly as on disk: a look-alike of SOUL.md or skills/ is
    some other (owner's) file, and a look-alike of memory/ is never the own logs."""
    target = ws / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(CANARY_HEALTH, encoding="utf-8")
    await refused(READ_FILE, ctx(ws, key), "not available", path=path)
    no_canary(await call(LIST_DIR, ctx(ws, key)))


async def test_nfd_spelling_of_a_shared_folder_is_a_different_folder(ws: Path) -> None:
    (ws / "Café").mkdir()
    (ws / "Café/menu.md").write_text("shared menu", encoding="utf-8")
    (ws / "Cafe\u0301").mkdir()
    (ws / "Cafe\u0301/secret.md").write_text(CANARY_HEALTH, encoding="utf-8")
    sub = ctx(ws, GROUP, extra_roots=("Café",))
    assert await call(READ_FILE, sub, path="Café/menu.md") == "shared menu"
    await refused(READ_FILE, sub, "not available", path="Cafe\u0301/secret.md")


# --- what error lines and listings show --------------------------------------------------


@pytest.mark.parametrize("key", ["main", *SUBS])
async def test_errors_never_show_absolute_machine_paths(ws: Path, key: str) -> None:
    own = OWN.get(key, "notes")
    (ws / own).mkdir(parents=True, exist_ok=True)
    (ws / own / "loop").symlink_to(ws / own / "loop")
    (ws / own / "out").symlink_to(ws.parent / "outside.txt")
    (ws / own / "bin.dat").write_bytes(b"\x00\x01\x02")
    (ws / own / "dir").mkdir()
    os.mkfifo(ws / own / "fifo")
    os.link(ws / "USER.md", ws / own / "hard.md")
    (ws / own / "locked.md").write_text("x", encoding="utf-8")
    (ws / own / "locked.md").chmod(0)
    c = ctx(ws, key)
    attempts: list[tuple[Tool[Any], dict[str, Any]]] = [
        (READ_FILE, {"path": p})
        for p in (
            "../outside.txt", str(ws / "USER.md"), str(ws.parent / "outside.txt"), "~/.ssh/id_rsa",
            f"{own}/loop", f"{own}/out", f"{own}/bin.dat", f"{own}/dir", f"{own}/fifo",
            f"{own}/hard.md", f"{own}/missing.md", "notes/health.md", str(Path.home()),
            f"{own}/locked.md", "",
        )
    ]
    attempts += [
        (LIST_DIR, {"path": str(ws.parent)}), (LIST_DIR, {"path": f"{own}/bin.dat"}),
        (LIST_DIR, {"path": f"{own}/nope"}), (LIST_DIR, {"path": f"{own}/out"}),
        (WRITE_FILE, {"path": f"{own}/dir", "content": "x"}),
        (WRITE_FILE, {"path": str(ws / "SOUL.md"), "content": "x"}),
        (EDIT_FILE, {"path": f"{own}/missing.md", "old_string": "a", "new_string": "b"}),
        (MEMORY_GET, {"path": "memory/nope.md"}), (MEMORY_GET, {"path": str(ws / "MEMORY.md")}),
        (LOAD_SKILL, {"name": "nope"}),
    ]
    machine = {str(ws), str(ws.resolve()), str(ws.parent), str(Path.home()), "/tmp/", "/home/"}
    messages = []
    for tool, kwargs in attempts:
        try:
            await call(tool, c, **kwargs)
        except ToolError as exc:
            messages.append(str(exc))
    (ws / own / "locked.md").chmod(0o600)
    assert len(messages) >= len(attempts) - 3  # a few are allowed in main
    for message in messages:
        for path in machine:
            assert path not in message, f"{path} shown in {message!r}"


@pytest.mark.parametrize("key", ["main", *SUBS])
async def test_list_dir_never_shows_symlink_targets(ws: Path, key: str) -> None:
    own = OWN.get(key, "notes")
    (ws / own).mkdir(parents=True, exist_ok=True)
    (ws / own / "soul").symlink_to(ws / "SOUL.md")
    (ws / own / "rel").symlink_to("own.md" if key != "main" else "../SOUL.md")
    listing = await call(LIST_DIR, ctx(ws, key), path=own)
    assert "soul@ (link)" in listing and "rel@ (link)" in listing
    assert "->" not in listing and str(ws) not in listing and "SOUL" not in listing


# --- skills and memory_get follow the same rules -----------------------------------------


@pytest.mark.parametrize("key", SUBS)
async def test_skill_symlinked_to_a_private_note_is_not_loaded_in_a_sub_scope(
    ws: Path, key: str
) -> None:
    (ws / "notes").mkdir()
    (ws / "notes/private-skill.md").write_text(
        f"---\nname: diary\ndescription: {CANARY_HEALTH}\n---\n{CANARY_HEALTH}\n", encoding="utf-8"
    )
    (ws / "skills/diary").mkdir()
    (ws / "skills/diary/SKILL.md").symlink_to(ws / "notes/private-skill.md")
    message = await refused(LOAD_SKILL, ctx(ws, key), "no skill named 'diary'", name="diary")
    assert "weather" in message
    no_canary(message)
    assert CANARY_HEALTH in await call(LOAD_SKILL, ctx(ws), name="diary")


# --- off the event loop -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "kwargs"),
    [
        (READ_FILE, {"path": "SOUL.md"}),
        (LIST_DIR, {"path": "."}),
        (WRITE_FILE, {"path": "groups/telegram_-100123/x.md", "content": "x"}),
        (MEMORY_GET, {"path": "memory/groups/telegram_-100123/2025-01-01.md"}),
        (LOAD_SKILL, {"name": "weather"}),
    ],
)
async def test_file_reads_leave_the_event_loop_free(ws: Path, tool: Tool[Any], kwargs: dict[str, Any]) -> None:
    """The file work runs in a worker thread: after one turn of the loop the call has not
    finished (run on the loop it would have, blocking every other chat while it read)."""
    task = asyncio.create_task(call(tool, ctx(ws, GROUP), **kwargs))
    await asyncio.sleep(0)  # timing-ok: exactly one loop turn, no race
    assert not task.done()
    assert await task


@pytest.mark.parametrize("link", ["symlink", "hard link"])
async def test_memory_write_to_the_log_never_writes_through_a_link(ws: Path, link: str) -> None:
    """Today's log replaced by a link to a file outside the workspace: the note is refused
    and the outside file is unchanged."""
    outside = ws.parent / "outside.txt"
    today = log_path(ws, "main", datetime.now().astimezone().date())
    today.parent.mkdir(parents=True, exist_ok=True)
    today.unlink(missing_ok=True)
    if link == "symlink":
        today.symlink_to(outside)
    else:
        os.link(outside, today)
    message = await refused(MEMORY_WRITE, ctx(ws), "cannot write this chat's log", target="log", text="pwned")
    assert str(ws.parent) not in message
    assert outside.read_text(encoding="utf-8") == CANARY_OUTSIDE

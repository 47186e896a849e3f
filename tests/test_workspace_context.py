"""Workspace bootstrap, daily logs and the per-scope prompt context (canary tests)."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from agent_core.risk import Scope
from workspace.bootstrap import ensure_workspace
from workspace.context import FILE_CAP, TOTAL_CAP, USER_CAP, PromptContext, build_context
from workspace.daily_log import (
    append_entry,
    append_run_entry,
    log_dir_for,
    log_path,
    slug,
)

TZ = timezone(timedelta(hours=2))
NOW = datetime(2025, 3, 14, 9, 30, tzinfo=TZ)
LATER_SAME_DAY = datetime(2025, 3, 14, 23, 59, 58, tzinfo=TZ)
GROUP = "group:telegram:-100123"
OTHER_GROUP = "group:telegram:-100999:7"
DM = "dm:discord:42"


# --- bootstrap -------------------------------------------------------------------------


def test_ensure_workspace_creates_templates_and_dirs(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    created = ensure_workspace(root)
    for name in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "USER.md", "MEMORY.md", "HEARTBEAT.md"):
        assert (root / name).is_file()
        assert (root / name) in created
        assert (root / name).read_text(encoding="utf-8").strip()
    assert (root / "memory").is_dir() and (root / "skills").is_dir()
    assert not list(root.rglob(".gitkeep"))
    assert "Roost" in (root / "IDENTITY.md").read_text(encoding="utf-8")


def test_ensure_workspace_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("my own soul", encoding="utf-8")
    (tmp_path / "USER.md").write_text("", encoding="utf-8")
    created = ensure_workspace(tmp_path)
    assert (tmp_path / "SOUL.md").read_text(encoding="utf-8") == "my own soul"
    assert (tmp_path / "USER.md").read_text(encoding="utf-8") == ""
    assert tmp_path / "SOUL.md" not in created
    assert ensure_workspace(tmp_path) == []


# --- daily logs ------------------------------------------------------------------------


def test_log_dirs_per_session_kind() -> None:
    assert log_dir_for("main") == Path("memory")
    assert log_dir_for(GROUP) == Path("memory/groups/telegram_-100123")
    assert log_dir_for("group:discord:1:2") == Path("memory/groups/discord_1_2")
    assert log_dir_for(DM) == Path("memory/dms/discord_42")
    assert log_path(Path("/w"), "main", date(2025, 1, 2)) == Path("/w/memory/2025-01-02.md")


@pytest.mark.parametrize(
    "key", ["", "mian", "group:", "group:telegram", "group:t::", "dm:x", "dm:x:y:z", "x:y:z"]
)
def test_bad_session_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError):
        log_dir_for(key)


def test_slug_is_safe_deterministic_and_injective() -> None:
    weird = ["a/../b:c", "a_b:c", "a:b:c", "A:b", "a:b", "../..:x", "x" * 300 + ":y"]
    slugs = [slug(v) for v in weird]
    assert len(set(slugs)) == len(slugs)
    assert slugs == [slug(v) for v in weird]
    for s in slugs:
        assert "/" not in s and ".." not in s and s not in ("", ".")
        assert len(s) <= 100
    assert log_dir_for("group:tg:../../etc").parent == Path("memory/groups")


def test_append_entry_and_run_entry(tmp_path: Path) -> None:
    path = append_entry(tmp_path, GROUP, NOW, "first note")
    assert path == tmp_path / "memory/groups/telegram_-100123/2025-03-14.md"
    append_run_entry(tmp_path, GROUP, LATER_SAME_DAY, "alice", "x" * 1000, "did it\n\nwell")
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# 2025-03-14\n")
    assert "### 09:30:00\nfirst note" in text
    assert "### 23:59:58\n**alice** asked: " in text
    assert "**Did:** did it well" in text
    asked_line = next(line for line in text.splitlines() if "asked:" in line)
    assert len(asked_line) < 360 and asked_line.endswith("…")


# --- context by scope ------------------------------------------------------------------


def _populate(root: Path) -> None:
    ensure_workspace(root)
    (root / "USER.md").write_text("Owner lives in CANARY_USER_city.", encoding="utf-8")
    (root / "MEMORY.md").write_text("Long-term: CANARY_MEMORY_secret.", encoding="utf-8")
    append_entry(root, "main", NOW - timedelta(days=1), "yesterday: CANARY_MAIN_YESTERDAY")
    append_entry(root, "main", NOW, "today: CANARY_MAIN_TODAY")
    append_entry(root, GROUP, NOW - timedelta(days=1), "group yesterday: CANARY_GROUP_YESTERDAY")
    append_entry(root, GROUP, NOW, "group today: GROUP_TODAY_VISIBLE")
    append_entry(root, OTHER_GROUP, NOW, "other group: CANARY_OTHER_GROUP")
    append_entry(root, DM, NOW, "someone's dm: CANARY_DM")
    write_weather_skill(root)


def write_weather_skill(root: Path) -> None:
    """skills/weather/SKILL.md, a valid skill ("Check the forecast")."""
    skill = root / "skills" / "weather"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: weather\ndescription: Check the forecast\n---\nUse wttr.in\n", encoding="utf-8"
    )


def _all(ctx: PromptContext) -> str:
    return ctx.stable + "\n" + ctx.volatile


def test_main_context_has_everything_private(tmp_path: Path) -> None:
    _populate(tmp_path)
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    for canary in ("CANARY_USER_city", "CANARY_MEMORY_secret", "CANARY_MAIN_YESTERDAY"):
        assert canary in ctx.stable
    assert "CANARY_MAIN_TODAY" in ctx.volatile and "CANARY_MAIN_TODAY" not in ctx.stable
    assert "- weather: Check the forecast (skills/weather/SKILL.md)" in ctx.stable
    assert "# Soul" in ctx.stable and "# Identity" in ctx.stable
    assert "2025-03-14 09:30" in ctx.volatile
    for foreign in ("CANARY_GROUP", "CANARY_OTHER_GROUP", "CANARY_DM", "GROUP_TODAY_VISIBLE"):
        assert foreign not in _all(ctx)


@pytest.mark.parametrize("key", [GROUP, DM])
def test_sub_context_never_sees_private_memory(tmp_path: Path, key: str) -> None:
    _populate(tmp_path)
    ctx = build_context(tmp_path, key, Scope.SUB, NOW)
    text = _all(ctx)
    for canary in (
        "CANARY_USER_city",
        "CANARY_MEMORY_secret",
        "CANARY_MAIN_YESTERDAY",
        "CANARY_MAIN_TODAY",
        "CANARY_OTHER_GROUP",
        "CANARY_GROUP_YESTERDAY",  # not even its own yesterday
    ):
        assert canary not in text
    assert "# Soul" in ctx.stable and "# How to work" in ctx.stable
    assert "- weather: Check the forecast" in ctx.stable
    if key == GROUP:
        assert "GROUP_TODAY_VISIBLE" in ctx.volatile and "CANARY_DM" not in text
    else:
        assert "CANARY_DM" in ctx.volatile and "GROUP_TODAY_VISIBLE" not in text


def test_sub_scope_with_main_key_is_refused(tmp_path: Path) -> None:
    _populate(tmp_path)
    with pytest.raises(ValueError):
        build_context(tmp_path, "main", Scope.SUB, NOW)


def test_stable_part_is_byte_identical_within_a_day(tmp_path: Path) -> None:
    _populate(tmp_path)
    a = build_context(tmp_path, "main", Scope.MAIN, NOW)
    append_entry(tmp_path, "main", NOW + timedelta(hours=1), "a new entry today")
    b = build_context(tmp_path, "main", Scope.MAIN, LATER_SAME_DAY)
    assert a.stable.encode() == b.stable.encode()
    assert a.volatile != b.volatile
    assert "Current date" not in a.stable and "23:59" not in b.stable
    tomorrow = build_context(tmp_path, "main", Scope.MAIN, NOW + timedelta(days=1))
    assert "CANARY_MAIN_TODAY" in tomorrow.stable  # today's log becomes yesterday's


def test_missing_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "SOUL.md").write_text("only a soul", encoding="utf-8")
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    assert "only a soul" in ctx.stable
    assert "USER.md" not in ctx.stable and "Skills" not in ctx.stable
    assert "Today's log" not in ctx.volatile


def test_caps_cut_with_visible_notices(tmp_path: Path) -> None:
    (tmp_path / "USER.md").write_text("U" * USER_CAP + "USER_TAIL_CUT", encoding="utf-8")
    (tmp_path / "SOUL.md").write_text("S" * FILE_CAP + "SOUL_TAIL_CUT", encoding="utf-8")
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    assert "USER_TAIL_CUT" not in ctx.stable and "SOUL_TAIL_CUT" not in ctx.stable
    assert f"showing the first {USER_CAP:,} of {USER_CAP + 13:,} characters" in ctx.stable
    assert f"showing the first {FILE_CAP:,} of {FILE_CAP + 13:,} characters" in ctx.stable
    assert "U" * USER_CAP in ctx.stable


def test_total_cap_applies_across_files(tmp_path: Path) -> None:
    for name in ("SOUL.md", "IDENTITY.md", "AGENTS.md", "MEMORY.md"):
        (tmp_path / name).write_text(name[0] * (FILE_CAP - 10), encoding="utf-8")
    append_entry(tmp_path, "main", NOW, "TODAY_OMITTED")
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    body_chars = sum(ctx.stable.count(c) for c in "SIAM")
    assert body_chars <= TOTAL_CAP + 200  # letters in headings and notices
    assert f"the {TOTAL_CAP:,}-character context cap" in ctx.stable
    assert "[omitted: the 60,000-character context cap is reached]" in ctx.volatile
    assert "TODAY_OMITTED" not in ctx.volatile


def test_long_log_keeps_its_newest_part(tmp_path: Path) -> None:
    for i in range(3000):
        append_entry(tmp_path, "main", NOW, f"entry {i:04d} " + "z" * 10)
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    assert "entry 2999" in ctx.volatile and "entry 0000" not in ctx.volatile
    assert "showing the last 20,000 of" in ctx.volatile


def test_unreadable_bytes_do_not_crash(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"ok \xff\xfe bytes")
    ctx = build_context(tmp_path, "main", Scope.MAIN, NOW)
    assert "ok" in ctx.stable


# --- the context builder follows the sub-scope allow-list --------------------------------


@pytest.mark.parametrize("key", [GROUP, DM])
def test_identity_file_linked_to_a_private_note_stays_out_of_a_sub_context(
    tmp_path: Path, key: str
) -> None:
    _populate(tmp_path)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/health.md").write_text("CANARY_HEALTH_note", encoding="utf-8")
    (tmp_path / "AGENTS.md").unlink()
    (tmp_path / "AGENTS.md").symlink_to(tmp_path / "notes/health.md")
    (tmp_path / "skills/diary").mkdir()
    (tmp_path / "notes/diary.md").write_text(
        "---\nname: diary\ndescription: CANARY_SKILL_desc\n---\nbody\n", encoding="utf-8"
    )
    (tmp_path / "skills/diary/SKILL.md").symlink_to(tmp_path / "notes/diary.md")
    sub = _all(build_context(tmp_path, key, Scope.SUB, NOW))
    assert "CANARY_HEALTH_note" not in sub and "CANARY_SKILL_desc" not in sub
    assert "- weather: Check the forecast" in sub and "# Soul" in sub
    main = _all(build_context(tmp_path, "main", Scope.MAIN, NOW))
    assert "CANARY_HEALTH_note" in main and "CANARY_SKILL_desc" in main


@pytest.mark.parametrize(("key", "scope"), [("main", Scope.MAIN), (GROUP, Scope.SUB)])
def test_hard_linked_or_outside_identity_files_are_left_out(
    tmp_path: Path, key: str, scope: Scope
) -> None:
    root = tmp_path / "ws"
    _populate(root)
    (tmp_path / "outside.md").write_text("CANARY_OUTSIDE_file", encoding="utf-8")
    (root / "SOUL.md").unlink()
    os.link(root / "MEMORY.md", root / "SOUL.md")
    (root / "IDENTITY.md").unlink()
    (root / "IDENTITY.md").symlink_to(tmp_path / "outside.md")
    text = _all(build_context(root, key, scope, NOW))
    assert "CANARY_OUTSIDE_file" not in text and "## SOUL.md" not in text
    if scope is Scope.SUB:
        assert "CANARY_MEMORY_secret" not in text


def test_a_huge_log_costs_a_bounded_read(tmp_path: Path) -> None:
    path = log_path(tmp_path, GROUP, NOW.date())
    path.parent.mkdir(parents=True)
    with path.open("wb") as fh:
        fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of NULs on disk for free
        fh.seek(0, 2)
        fh.write(b"\nNEWEST_ENTRY\n")
    ctx = build_context(tmp_path, GROUP, Scope.SUB, NOW)
    assert "NEWEST_ENTRY" in ctx.volatile
    assert f"of {64 * 1024 * 1024 + 14:,} bytes" in ctx.volatile
    assert len(ctx.volatile) < FILE_CAP + 500


def test_sub_context_names_the_files_the_chat_can_see(tmp_path: Path) -> None:
    _populate(tmp_path)
    group = build_context(tmp_path, GROUP, Scope.SUB, NOW, extra_roots=("shared/team", "memory"))
    assert "## Files this chat can see" in group.stable
    assert "- groups/telegram_-100123/: this chat's own folder" in group.stable
    assert "- memory/groups/telegram_-100123/: this chat's daily logs, read-only" in group.stable
    assert "- shared/team/: shared with this chat by the owner" in group.stable
    assert "- memory/: shared" not in group.stable  # an unsafe extra root is ignored
    dm = build_context(tmp_path, DM, Scope.SUB, NOW)
    assert "- dms/discord_42/: this chat's own folder" in dm.stable and "shared" not in dm.stable
    assert "Files this chat can see" not in build_context(tmp_path, "main", Scope.MAIN, NOW).stable

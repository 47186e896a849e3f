"""The context builder's read cache (workspace/read_cache.py): the same text as without it,
and never a refusal turned into text by something changed on disk after the cache was filled.

Each attack fills the cache with an allowed read, changes the workspace the way a leak would
need (a symlink or hard link swapped in, a folder replaced, a same-tick rewrite), and checks
the next context. The clock is injected: `Clock.old()` makes every file look older than the
racy window (so reads are cached), which is what lets these attacks reach the cache at all.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import workspace.context as context_module
from agent_core.risk import Scope
from tests.test_workspace_context import _all, write_weather_skill
from workspace.access import Access
from workspace.bootstrap import ensure_workspace
from workspace.context import _read, build_context
from workspace.daily_log import append_entry, log_dir_for, log_path
from workspace.read_cache import RACY_NS, ReadCache

TZ = timezone(timedelta(hours=2))
NOW = datetime(2025, 3, 14, 9, 30, tzinfo=TZ)
GROUP = "group:telegram:-100123"
OTHER_GROUP = "group:telegram:-100999"


class Clock:
    """time.time_ns shifted by a settable offset."""

    def __init__(self, offset_ns: int = 0) -> None:
        self.offset_ns = offset_ns

    def __call__(self) -> int:
        return time.time_ns() + self.offset_ns

    @classmethod
    def old(cls) -> Clock:
        """Every file on disk looks older than the racy window."""
        return cls(10 * RACY_NS)

    @classmethod
    def racy(cls) -> Clock:
        """Every file on disk looks just written (stamped in the future, even when cut to a
        coarse tick): no text is stored, reads go through the approvals instead."""
        return cls(-2 * TICK_NS)

    def advance(self, ns: int) -> None:
        self.offset_ns += ns


TICK_NS = 1000 * 10**9


class _CoarseStat:
    """A stat result whose timestamps are cut to a coarse tick."""

    def __init__(self, st: os.stat_result) -> None:
        self._st = st
        self.st_mtime_ns = st.st_mtime_ns // TICK_NS * TICK_NS
        self.st_ctime_ns = st.st_ctime_ns // TICK_NS * TICK_NS

    def __getattr__(self, name: str) -> object:
        return getattr(self._st, name)


@pytest.fixture
def same_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every change in a test lands in one timestamp tick, as writes a few ms apart do on a
    file system with coarse timestamps (a jiffy on kernels before multigrain timestamps, a
    second on ext3 or HFS+). This kernel stamps each change apart, which would hide what the
    cache must not rely on: that a timestamp moves. stat, lstat and fstat see the coarse times."""
    lstat, fstat, stat_ = os.lstat, os.fstat, os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: _CoarseStat(stat_(*a, **k)))
    monkeypatch.setattr(os, "lstat", lambda *a, **k: _CoarseStat(lstat(*a, **k)))
    monkeypatch.setattr(os, "fstat", lambda *a, **k: _CoarseStat(fstat(*a, **k)))


@pytest.fixture(params=["old", "racy"])
def cache(request: pytest.FixtureRequest) -> ReadCache:
    """Both ways the cache skips the slow path: a stored text (old files) and an approval to
    open a file without `confine` (racy files, e.g. today's log)."""
    return ReadCache(clock=Clock.old() if request.param == "old" else Clock.racy())


def _populate(root: Path) -> None:
    ensure_workspace(root)
    (root / "AGENTS.md").write_text("# Agents\nAGENTS_V1 rules", encoding="utf-8")
    (root / "USER.md").write_text("Owner lives in CANARY_USER_city.", encoding="utf-8")
    (root / "MEMORY.md").write_text("Long-term: CANARY_MEMORY_secret.", encoding="utf-8")
    (root / "notes").mkdir()
    append_entry(root, "main", NOW - timedelta(days=1), "yesterday: MAIN_YESTERDAY")
    append_entry(root, "main", NOW, "today: MAIN_TODAY")
    append_entry(root, GROUP, NOW, "group today: GROUP_TODAY_TEXT")
    append_entry(root, OTHER_GROUP, NOW, "other group: CANARY_OTHER_GROUP")
    write_weather_skill(root)


def _group(root: Path, cache: ReadCache, key: str = GROUP) -> str:
    return _all(build_context(root, key, Scope.SUB, NOW, cache=cache))


def _main(root: Path, cache: ReadCache) -> str:
    return _all(build_context(root, "main", Scope.MAIN, NOW, cache=cache))


# --- attacks: every refusal stays a refusal ------------------------------------------------


def test_symlink_swapped_in_after_caching_is_refused_not_served_from_cache(
    tmp_path: Path, same_tick: None, cache: ReadCache
) -> None:
    _populate(tmp_path)
    assert "AGENTS_V1" in _group(tmp_path, cache)
    (tmp_path / "AGENTS.md").unlink()
    (tmp_path / "AGENTS.md").symlink_to(tmp_path / "USER.md")
    for _ in range(2):  # the refusal is decided again each time, never remembered as text
        text = _group(tmp_path, cache)
        assert "CANARY_USER_city" not in text
        assert "AGENTS_V1" not in text  # the file is refused now; the old text is gone too
    # main may follow a link inside the workspace: it sees what the slow path gives it
    assert "CANARY_USER_city" in _main(tmp_path, cache)


def test_cached_file_moved_to_a_private_place_and_linked_back_is_refused(
    tmp_path: Path, same_tick: None, cache: ReadCache
) -> None:
    """The very inode that was cached, unchanged, behind a symlink: following the link would
    find every field equal; its path is now a private note, so a group is refused."""
    _populate(tmp_path)
    assert "AGENTS_V1" in _group(tmp_path, cache)
    before = os.lstat(tmp_path / "AGENTS.md")
    os.rename(tmp_path / "AGENTS.md", tmp_path / "notes" / "agents.md")
    (tmp_path / "AGENTS.md").symlink_to(tmp_path / "notes" / "agents.md")
    after = os.stat(tmp_path / "AGENTS.md")  # the link followed
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert "AGENTS_V1" not in _group(tmp_path, cache)
    assert "AGENTS_V1" in _main(tmp_path, cache)


def test_directory_component_swapped_for_symlink_is_rechecked(
    tmp_path: Path, same_tick: None, cache: ReadCache
) -> None:
    _populate(tmp_path)
    assert "GROUP_TODAY_TEXT" in _group(tmp_path, cache)
    own = tmp_path / log_dir_for(GROUP)
    other = tmp_path / log_dir_for(OTHER_GROUP)
    before = os.lstat(own)
    # 1. the group's log folder becomes a link to another group's: that log never shows
    os.rename(own, tmp_path / "notes" / "moved")
    own.symlink_to(other, target_is_directory=True)
    text = _group(tmp_path, cache)
    assert "CANARY_OTHER_GROUP" not in text and "GROUP_TODAY_TEXT" not in text
    # 2. the folder itself, moved off the allow-list and linked back: every field of the
    # folder and of the log is as cached, but the path leads to a private note now
    own.unlink()
    os.rename(tmp_path / "notes" / "moved", tmp_path / "notes" / "archive")
    own.symlink_to(tmp_path / "notes" / "archive", target_is_directory=True)
    after = os.stat(own)  # the link followed
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)
    assert "GROUP_TODAY_TEXT" not in _group(tmp_path, cache)
    # back in place as a real folder: allowed again
    own.unlink()
    os.rename(tmp_path / "notes" / "archive", own)
    assert "GROUP_TODAY_TEXT" in _group(tmp_path, cache)


def test_hard_link_added_after_caching_is_refused(
    tmp_path: Path, same_tick: None, cache: ReadCache
) -> None:
    _populate(tmp_path)
    assert "AGENTS_V1" in _group(tmp_path, cache)
    # a second name for the cached file itself: same inode, bytes and times, now refused
    os.link(tmp_path / "AGENTS.md", tmp_path / "notes" / "agents-copy.md")
    assert "AGENTS_V1" not in _group(tmp_path, cache)
    assert "AGENTS_V1" not in _main(tmp_path, cache)
    (tmp_path / "notes" / "agents-copy.md").unlink()
    assert "AGENTS_V1" in _group(tmp_path, cache)
    # AGENTS.md replaced by a hard link to USER.md
    (tmp_path / "AGENTS.md").unlink()
    os.link(tmp_path / "USER.md", tmp_path / "AGENTS.md")
    text = _group(tmp_path, cache)
    assert "CANARY_USER_city" not in text and "AGENTS_V1" not in text


def test_file_swapped_while_it_is_read_is_not_cached_as_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same_tick: None
) -> None:
    """AGENTS.md is replaced between the cache's lstat and the slow path's open, and put back
    later: the text read (v2) must not be remembered as the text of the first file (v1)."""
    _populate(tmp_path)
    agents, aside = tmp_path / "AGENTS.md", tmp_path / "notes" / "v1.md"
    real_confine = context_module.confine
    swaps: list[str] = []

    def swap_then_confine(root: Path, raw: str, *args: object, **kwargs: object) -> object:
        if raw == "AGENTS.md" and not swaps:
            swaps.append(raw)
            os.rename(agents, aside)
            agents.write_text("# Agents\nAGENTS_V2 rules", encoding="utf-8")
        return real_confine(root, raw, *args, **kwargs)

    monkeypatch.setattr(context_module, "confine", swap_then_confine)
    cache = ReadCache(clock=Clock.old())
    assert "AGENTS_V2" in _group(tmp_path, cache)
    os.replace(aside, agents)  # v1 is back, same inode and times as when first seen
    text = _group(tmp_path, cache)
    assert "AGENTS_V1" in text and "AGENTS_V2" not in text


def test_folder_swapped_between_lstat_and_open_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Today's log (racy, so opened on an approval without `confine`): its folder becomes a
    link to a private folder after the cache's lstat and before the open. What was opened is
    not the file lstat saw, so the slow path decides, and refuses."""
    _populate(tmp_path)
    cache = ReadCache(clock=Clock.racy())
    assert "GROUP_TODAY_TEXT" in _group(tmp_path, cache)
    own = tmp_path / log_dir_for(GROUP)
    private = tmp_path / "notes" / "private"
    private.mkdir()
    (private / log_path(tmp_path, GROUP, NOW.date()).name).write_text(
        "CANARY_PRIVATE_LOG", encoding="utf-8"
    )
    real_open = context_module.open_regular
    armed = [True]

    def swap_then_open(real: Path, rel: object) -> object:
        if armed and str(real).startswith(str(own)):
            armed.clear()
            os.rename(own, tmp_path / "notes" / "group-logs")
            own.symlink_to(private, target_is_directory=True)
        return real_open(real, rel)

    monkeypatch.setattr(context_module, "open_regular", swap_then_open)
    text = _group(tmp_path, cache)
    assert not armed  # the swap happened between the lstat and the open
    assert "CANARY_PRIVATE_LOG" not in text and "GROUP_TODAY_TEXT" not in text


def test_racy_log_is_read_without_confine_once_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(tmp_path)
    cache = ReadCache(clock=Clock.racy())
    assert "GROUP_TODAY_TEXT" in _group(tmp_path, cache)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("confine called for an approved, unchanged way to the file")

    monkeypatch.setattr(context_module, "confine", refuse)
    append_entry(tmp_path, GROUP, NOW, "group: APPENDED_AFTER")
    text = _group(tmp_path, cache)
    assert "APPENDED_AFTER" in text and "GROUP_TODAY_TEXT" in text
    assert len(cache) == 0  # racy: no text was stored


def test_text_approved_for_main_is_not_served_to_a_group(
    tmp_path: Path, cache: ReadCache
) -> None:
    _populate(tmp_path)
    real_root = os.path.realpath(tmp_path)
    main, group = Access("main", "main"), Access(GROUP, "sub")
    for _ in range(2):  # filled, then served from the cache (old) or its approval (racy)
        text = _read(tmp_path, "USER.md", main, "head", real_root, cache=cache)
        assert text is not None and "CANARY_USER_city" in text.text
    for _ in range(2):
        assert _read(tmp_path, "USER.md", group, "head", real_root, cache=cache) is None


def test_a_log_read_for_one_chat_is_not_served_to_another(tmp_path: Path, cache: ReadCache) -> None:
    """Answers are shared by every access that `allows` the path: another chat is not one
    of them for this chat's log."""
    _populate(tmp_path)
    real_root = os.path.realpath(tmp_path)
    log = log_path(tmp_path, GROUP, NOW.date()).relative_to(tmp_path).as_posix()
    group, other = Access(GROUP, "sub"), Access(OTHER_GROUP, "sub")
    for _ in range(2):
        text = _read(tmp_path, log, group, "tail", real_root, cache=cache)
        assert text is not None and "GROUP_TODAY_TEXT" in text.text
    for _ in range(2):
        assert _read(tmp_path, log, other, "tail", real_root, cache=cache) is None


def test_refused_file_is_refused_every_time(tmp_path: Path, cache: ReadCache) -> None:
    _populate(tmp_path)
    (tmp_path / "AGENTS.md").unlink()
    (tmp_path / "AGENTS.md").symlink_to(tmp_path / "MEMORY.md")
    for _ in range(3):
        assert "CANARY_MEMORY_secret" not in _group(tmp_path, cache)


def test_skill_swapped_for_a_link_to_a_private_note_is_refused(
    tmp_path: Path, same_tick: None, cache: ReadCache
) -> None:
    _populate(tmp_path)
    (tmp_path / "skills" / "diary").mkdir()
    skill = tmp_path / "skills" / "diary" / "SKILL.md"
    skill.write_text("---\nname: diary\ndescription: SKILL_DIARY_desc\n---\nbody\n", encoding="utf-8")
    assert "SKILL_DIARY_desc" in _group(tmp_path, cache)
    # the same file, moved to a private note and linked back
    os.rename(skill, tmp_path / "notes" / "diary.md")
    skill.symlink_to(tmp_path / "notes" / "diary.md")
    for _ in range(2):
        assert "SKILL_DIARY_desc" not in _group(tmp_path, cache)
    assert "SKILL_DIARY_desc" in _main(tmp_path, cache)
    # a regular file again, but hard-linked to a note: refused in a group as well
    skill.unlink()
    os.link(tmp_path / "notes" / "diary.md", skill)
    assert "SKILL_DIARY_desc" not in _group(tmp_path, cache)


def test_skill_added_or_removed_shows_in_the_next_context(tmp_path: Path) -> None:
    _populate(tmp_path)
    clock = Clock.old()
    cache = ReadCache(clock=clock)
    assert "- weather: Check the forecast" in _group(tmp_path, cache)
    (tmp_path / "skills" / "todo").mkdir()
    (tmp_path / "skills" / "todo" / "SKILL.md").write_text(
        "---\nname: todo\ndescription: Keep a list\n---\nbody\n", encoding="utf-8"
    )
    clock.advance(2 * RACY_NS)
    for _ in range(2):
        assert "- todo: Keep a list" in _group(tmp_path, cache)
    (tmp_path / "skills" / "todo" / "SKILL.md").unlink()
    assert "- todo:" not in _group(tmp_path, cache)
    assert "- weather: Check the forecast" in _group(tmp_path, cache)


# --- freshness ---------------------------------------------------------------------------


def _same_tick_rewrite(root: Path, racy_offset_ns: int) -> str:
    """Write AGENTS.md (v1), build (fills the cache unless racy), rewrite it with text of the
    same size in the same timestamp tick (v2), build again: the text the second build shows.
    The clock says the file was written `racy_offset_ns` ago. Retries until the rewrite
    really lands in the same tick (same inode, size, mtime and ctime as v1)."""
    path = root / "AGENTS.md"
    for _ in range(3):
        path.write_text("AGENTS_SAME_TICK_V1", encoding="utf-8")
        st1 = os.lstat(path)
        clock = Clock()
        clock.offset_ns = max(st1.st_mtime_ns, st1.st_ctime_ns) + racy_offset_ns - time.time_ns()
        cache = ReadCache(clock=clock)
        assert "AGENTS_SAME_TICK_V1" in _group(root, cache)
        path.write_text("AGENTS_SAME_TICK_V2", encoding="utf-8")
        st2 = os.lstat(path)
        fields = ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")
        if all(getattr(st1, f) == getattr(st2, f) for f in fields):
            return _group(root, cache)
    pytest.fail("no two writes landed in the same tick")


def test_file_rewritten_in_the_same_tick_is_not_stale(
    tmp_path: Path, same_tick: None
) -> None:
    _populate(tmp_path)
    text = _same_tick_rewrite(tmp_path, racy_offset_ns=RACY_NS - 100_000_000)  # 1.9 s ago
    assert "AGENTS_SAME_TICK_V2" in text and "AGENTS_SAME_TICK_V1" not in text


def test_same_tick_rewrite_would_be_stale_without_the_racy_rule(
    tmp_path: Path, same_tick: None
) -> None:
    """Why the rule exists (and that the test above really hits the same tick): a file that
    the clock says is old is cached, and a same-size rewrite in its tick keeps every lstat
    field, so the old text would be served."""
    _populate(tmp_path)
    text = _same_tick_rewrite(tmp_path, racy_offset_ns=RACY_NS + 100_000_000)  # 2.1 s ago
    assert "AGENTS_SAME_TICK_V1" in text


def test_edited_file_shows_new_text(tmp_path: Path) -> None:
    _populate(tmp_path)
    clock = Clock.old()
    cache = ReadCache(clock=clock)
    assert "AGENTS_V1" in _group(tmp_path, cache)
    (tmp_path / "AGENTS.md").write_text("# Agents\nAGENTS_V2 new rules", encoding="utf-8")
    clock.advance(2 * RACY_NS)
    for _ in range(2):  # refilled with the new text, then served from the cache
        text = _group(tmp_path, cache)
        assert "AGENTS_V2 new rules" in text and "AGENTS_V1" not in text
    # replaced by rename (a new inode), same size and the same mtime as before
    old = (tmp_path / "AGENTS.md").stat()
    (tmp_path / "notes" / "next.md").write_text("# Agents\nAGENTS_V3 new rules", encoding="utf-8")
    os.utime(tmp_path / "notes" / "next.md", ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(tmp_path / "notes" / "next.md", tmp_path / "AGENTS.md")
    assert "AGENTS_V3 new rules" in _group(tmp_path, cache)


def test_file_created_after_a_miss_appears(tmp_path: Path) -> None:
    _populate(tmp_path)
    (tmp_path / "MEMORY.md").unlink()
    cache = ReadCache(clock=Clock.old())
    assert "## MEMORY.md" not in _main(tmp_path, cache)
    (tmp_path / "MEMORY.md").write_text("Long-term: NEW_MEMORY", encoding="utf-8")
    assert "NEW_MEMORY" in _main(tmp_path, cache)


def test_todays_log_appended_since_the_last_run_is_shown(tmp_path: Path) -> None:
    _populate(tmp_path)
    cache = ReadCache()  # the real clock: a log just appended is racy, read afresh
    assert "GROUP_TODAY_TEXT" in _group(tmp_path, cache)
    append_entry(tmp_path, GROUP, NOW, "group: SECOND_ENTRY")
    assert "SECOND_ENTRY" in _group(tmp_path, cache)


# --- the cache is used, and changes nothing ------------------------------------------------


def test_unchanged_files_are_served_without_opening_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(tmp_path)
    cache = ReadCache(clock=Clock.old())
    first = {key: build_context(tmp_path, key, scope, NOW, cache=cache)
             for key, scope in (("main", Scope.MAIN), (GROUP, Scope.SUB))}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("slow path taken for an unchanged file")

    for name in ("open_regular", "confine", "list_skills", "readable"):
        monkeypatch.setattr(context_module, name, refuse)
    for key, scope in (("main", Scope.MAIN), (GROUP, Scope.SUB)):
        assert build_context(tmp_path, key, scope, NOW, cache=cache) == first[key]


def test_a_new_chats_first_prompt_takes_the_shared_files_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: ReadCache
) -> None:
    """The identity files and the skills listing read for one chat serve the next chat's
    first prompt too (every new chat paid the slow path for them: bench/bench_core.py); only
    that chat's own log goes through `confine`. (A racy listing is never stored: it is
    listed again.)"""
    _populate(tmp_path)
    _group(tmp_path, cache)
    confined: list[str] = []
    real_confine = context_module.confine

    def counting(root: Path, raw: str, *args: object, **kwargs: object) -> object:
        confined.append(raw)
        return real_confine(root, raw, *args, **kwargs)  # type: ignore[arg-type]

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the skills were listed again for an unchanged folder")

    monkeypatch.setattr(context_module, "confine", counting)
    if len(cache):  # texts are stored (not racy, when only approvals are): the listing too
        for name in ("list_skills", "readable"):
            monkeypatch.setattr(context_module, name, refuse)
    text = _group(tmp_path, cache, OTHER_GROUP)
    assert "AGENTS_V1" in text and "Check the forecast" in text and "CANARY_OTHER_GROUP" in text
    assert confined == [log_path(tmp_path, OTHER_GROUP, NOW.date()).relative_to(tmp_path).as_posix()]


@pytest.mark.parametrize("key,scope", [("main", Scope.MAIN), (GROUP, Scope.SUB)])
def test_cached_context_is_the_uncached_context(tmp_path: Path, key: str, scope: Scope) -> None:
    _populate(tmp_path)
    (tmp_path / "SOUL.md").write_text("S" * 30_000 + "SOUL_TAIL_CUT", encoding="utf-8")
    path = log_path(tmp_path, key, NOW.date())
    for i in range(2000):
        append_entry(tmp_path, key, NOW, f"entry {i:04d} " + "z" * 40)
    upto = path.stat().st_size // 2
    cache = ReadCache(clock=Clock.old())
    for log_upto in (None, upto):
        plain = build_context(tmp_path, key, scope, NOW, log_upto=log_upto)
        for _ in range(2):
            assert build_context(tmp_path, key, scope, NOW, log_upto=log_upto, cache=cache) == plain


@pytest.mark.parametrize("key,scope", [("main", Scope.MAIN), (GROUP, Scope.SUB)])
def test_a_log_cut_before_its_first_byte_is_left_out_without_touching_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, scope: Scope
) -> None:
    """A conversation that began before today's log did (LogCutoffs gives 0 bytes): the
    context has the clock and no log, and building it lstats, confines and opens nothing
    for the log (it runs for every message)."""
    _populate(tmp_path)
    append_entry(tmp_path, key, NOW, "CANARY_TODAY")
    with_cache = ReadCache(clock=Clock.old())
    expected = [build_context(tmp_path, key, scope, NOW, log_upto=0, cache=c) for c in (None, with_cache)]
    log_rel = log_path(tmp_path, key, NOW.date()).relative_to(tmp_path).as_posix()
    real = {name: getattr(context_module, name) for name in ("snapshot", "confine")}

    def guarded(name: str):  # noqa: ANN202
        def call(root: object, rel: object, *args: object, **kwargs: object) -> object:
            assert not str(rel).endswith(log_rel), f"{name} touched today's log"
            return real[name](root, rel, *args, **kwargs)
        return call

    for name in real:
        monkeypatch.setattr(context_module, name, guarded(name))
    for context, cache in zip(expected, (None, with_cache), strict=True):
        assert "CANARY_TODAY" not in context.volatile and "Today's log" not in context.volatile
        assert build_context(tmp_path, key, scope, NOW, log_upto=0, cache=cache) == context


def test_cache_is_bounded(tmp_path: Path) -> None:
    _populate(tmp_path)
    cache = ReadCache(clock=Clock.old(), capacity=3, char_budget=60)
    _main(tmp_path, cache)
    for i in range(5):
        _group(tmp_path, cache, f"group:telegram:{i}")
    assert len(cache) <= 3
    assert "AGENTS_V1" in _group(tmp_path, cache)


@pytest.mark.parametrize("key", ["main", GROUP, "dm:discord:42", "group:discord:1:2", "main:job-7"])
def test_log_paths_are_the_daily_log_paths(tmp_path: Path, key: str) -> None:
    expected = log_path(tmp_path, key, NOW.date()).relative_to(tmp_path).as_posix()
    assert context_module._log_rel(key, NOW.date()) == expected

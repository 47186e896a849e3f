"""Memory index (SQLite FTS5; PostgreSQL when ROOST_TEST_POSTGRES_URL is set), scoped search,
incremental sync, and the memory tools."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agent_core.builtin_tools.memory_tools import MEMORY_GET, MEMORY_SEARCH, MEMORY_WRITE
from agent_core.risk import Scope
from agent_core.tools import Tool, ToolContext, ToolError
from workspace.daily_log import append_entry, log_path
from workspace.memory_files import CHUNK_CHARS, chunk_lines
from workspace.memory_index import (
    MemoryIndex,
    create_memory_tables,
    reindex_memory,
    search_owner,
)
from workspace.scoped_memory import ScopedMemory

TODAY = date(2025, 6, 10)
NOW = datetime(2025, 6, 10, 12, 0, tzinfo=timezone.utc)
GROUP = "group:telegram:-100123"
OTHER = "group:discord:555:1"
DM = "dm:telegram:77"
PG_URL = os.environ.get("ROOST_TEST_POSTGRES_URL")


@pytest.fixture(params=["sqlite", "postgresql"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        eng = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'roost.db'}")
        async with eng.begin() as conn:
            await conn.run_sync(create_memory_tables)
        yield eng
        await eng.dispose()
        return
    if not PG_URL:
        pytest.skip("ROOST_TEST_POSTGRES_URL is not set; PostgreSQL half skipped")
    schema = f"memtest_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(PG_URL)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
    eng = create_async_engine(PG_URL, connect_args={"server_settings": {"search_path": schema}})
    async with eng.begin() as conn:
        await conn.run_sync(create_memory_tables)
    try:
        yield eng
    finally:
        await eng.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        await admin.dispose()


def _write(root: Path, rel: str, content: str, mtime: float | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _day(key: str, days_ago: int) -> str:
    return log_path(Path(), key, TODAY - timedelta(days=days_ago)).as_posix()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    _write(root, "MEMORY.md", "# Memory\nOwner's dentist is Dr CANARYMEMORY; zebra passport.\n")
    _write(root, "USER.md", "zebra CANARYUSER\n")
    _write(root, _day("main", 0), "# today\nDiscussed the zebra budget CANARYMAINTODAY.\n")
    _write(root, _day("main", 1), "# yday\nzebra CANARYMAINYESTERDAY.\n")
    _write(root, _day(GROUP, 0), "# g\nThe group planned a zebra picnic GROUPOWN.\n")
    _write(root, _day(OTHER, 0), "# o\nzebra CANARYOTHERGROUP.\n")
    _write(root, _day(DM, 0), "# dm\nzebra CANARYDM.\n")
    return root


def index(engine: AsyncEngine, root: Path, **kw: Any) -> MemoryIndex:
    return MemoryIndex(engine, root, today=lambda: TODAY, **kw)


async def _texts(idx: MemoryIndex, query: str, key: str, scope: Scope) -> str:
    return "\n".join(f"{h.path} {h.snippet}" for h in await idx.search(query, key, scope, limit=25))


async def test_main_finds_long_term_memory_and_main_logs(engine: AsyncEngine, ws: Path) -> None:
    idx = index(engine, ws)
    await idx.sync()
    found = await _texts(idx, "zebra", "main", Scope.MAIN)
    for canary in ("CANARYMEMORY", "CANARYMAINTODAY", "CANARYMAINYESTERDAY"):
        assert canary in found
    for foreign in ("GROUPOWN", "CANARYOTHERGROUP", "CANARYDM", "CANARYUSER"):
        assert foreign not in found


@pytest.mark.parametrize(("key", "own"), [(GROUP, "GROUPOWN"), (DM, "CANARYDM")])
async def test_sub_search_sees_only_its_own_logs(
    engine: AsyncEngine, ws: Path, key: str, own: str
) -> None:
    idx = index(engine, ws)
    await idx.sync()
    found = await _texts(idx, "zebra", key, Scope.SUB)
    assert own in found
    for canary in ("CANARYMEMORY", "CANARYMAINTODAY", "CANARYMAINYESTERDAY", "CANARYUSER",
                   "CANARYOTHERGROUP"):
        assert canary not in found
    for query in ("dentist", "CANARYMEMORY", "budget", "passport"):
        assert await idx.search(query, key, Scope.SUB) == []


async def test_sub_scope_cannot_use_the_main_key(engine: AsyncEngine, ws: Path) -> None:
    with pytest.raises(ValueError):
        await index(engine, ws).search("zebra", "main", Scope.SUB)
    with pytest.raises(ValueError):
        ScopedMemory(index(engine, ws), ws, "main", Scope.SUB)
    assert search_owner(GROUP, Scope.SUB) == "memory/groups/telegram_-100123"


async def test_hits_carry_path_lines_snippet_score(engine: AsyncEngine, tmp_path: Path) -> None:
    lines = [f"line {i} filler text about nothing in particular" for i in range(1, 200)]
    lines[149] = "line 150 the secret word is QUOKKA here"
    _write(tmp_path, _day("main", 0), "\n".join(lines))
    idx = index(engine, tmp_path)
    await idx.sync()
    [hit] = await idx.search("quokka", "main", Scope.MAIN)
    assert hit.path == _day("main", 0)
    assert hit.start_line <= 150 <= hit.end_line and hit.end_line - hit.start_line < 60
    assert "QUOKKA" in hit.snippet and len(hit.snippet) <= 330
    assert hit.score > 0


async def test_newer_logs_rank_higher_and_memory_counts_as_recent(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    body = "We talked about the marmalade recipe.\n"
    for age in (200, 40, 3, 0):
        _write(tmp_path, _day("main", age), body)
    _write(tmp_path, "memory/notes-undated.md", body, mtime=datetime(2020, 1, 1).timestamp())
    idx = index(engine, tmp_path)
    await idx.sync()
    hits = await idx.search("marmalade recipe", "main", Scope.MAIN)
    order = [h.path for h in hits]
    assert order[:4] == [_day("main", a) for a in (0, 3, 40, 200)]
    assert order[-1] == "memory/notes-undated.md"
    _write(tmp_path, "MEMORY.md", body)
    await idx.sync()
    top = (await idx.search("marmalade recipe", "main", Scope.MAIN))[:2]
    assert {h.path for h in top} == {"MEMORY.md", _day("main", 0)}


async def test_broad_queries_rank_the_newest_matches(engine: AsyncEngine, tmp_path: Path) -> None:
    for age in range(10):
        _write(tmp_path, _day("main", age), f"common words here, day {age}\n")
    _write(tmp_path, _day(GROUP, 0), "common words in the group\n")
    _write(tmp_path, "MEMORY.md", "common words in long-term memory\n")
    idx = index(engine, tmp_path, candidate_window=3)
    await idx.sync()
    hits = await idx.search("common words", "main", Scope.MAIN)
    assert {h.path for h in hits} == {"MEMORY.md", _day("main", 0), _day("main", 1)}
    assert [h.path for h in await idx.search("common", GROUP, Scope.SUB)] == [_day(GROUP, 0)]


async def test_all_terms_first_then_any_term(engine: AsyncEngine, tmp_path: Path) -> None:
    _write(tmp_path, _day("main", 0), "apples and pears\n\n" + "x\n" * 2000 + "only apples\n")
    idx = index(engine, tmp_path)
    await idx.sync()
    both = await idx.search("apples pears", "main", Scope.MAIN)
    assert [h.start_line for h in both] == [1]
    either = await idx.search("pears bananas", "main", Scope.MAIN)
    assert [h.start_line for h in either] == [1]
    assert await idx.search("bananas", "main", Scope.MAIN) == []


async def test_stop_words_are_ignored(engine: AsyncEngine, tmp_path: Path) -> None:
    _write(tmp_path, _day("main", 0), "alice booked the dentist\n")
    idx = index(engine, tmp_path)
    await idx.sync()
    assert len(await idx.search("what did alice say about the dentist?", "main", Scope.MAIN)) == 1
    assert await idx.search("the of and what", "main", Scope.MAIN) == []


@pytest.mark.parametrize(
    "query", ['"', 'apples" OR x*', "NEAR(a b)", "-apples", "a:b", "()", "", "   ", "ünïcödé 中文", "or"]
)
async def test_hostile_queries_never_crash(engine: AsyncEngine, tmp_path: Path, query: str) -> None:
    _write(tmp_path, _day("main", 0), "apples\n")
    idx = index(engine, tmp_path)
    await idx.sync()
    assert isinstance(await idx.search(query, "main", Scope.MAIN), list)


async def test_incremental_sync(engine: AsyncEngine, ws: Path) -> None:
    idx = index(engine, ws)
    first = await idx.sync()
    assert (first.scanned, first.indexed, first.unchanged) == (6, 6, 0)
    again = await idx.sync()
    assert (again.indexed, again.hashed, again.unchanged, again.removed) == (0, 0, 6, 0)

    edited = ws / _day("main", 1)
    old = edited.stat().st_mtime
    edited.write_text("# yday\nnow about a walrus\n", encoding="utf-8")
    os.utime(edited, (old + 10, old + 10))
    touched = ws / _day(GROUP, 0)
    os.utime(touched, (old + 20, old + 20))  # new mtime, same content: hashed, not re-indexed
    stats = await idx.sync()
    assert (stats.hashed, stats.indexed, stats.unchanged) == (2, 1, 4)
    assert await _texts(idx, "walrus", "main", Scope.MAIN)
    assert "CANARYMAINYESTERDAY" not in await _texts(idx, "zebra", "main", Scope.MAIN)

    async with engine.connect() as conn:
        rows = dict((await conn.execute(text("SELECT path, mtime_ns FROM memory_files"))).all())
    assert rows[_day(GROUP, 0)] == touched.stat().st_mtime_ns

    (ws / _day(DM, 0)).unlink()
    stats = await idx.sync()
    assert stats.removed == 1
    assert await idx.search("zebra", DM, Scope.SUB) == []
    async with engine.connect() as conn:
        left = (await conn.execute(text("SELECT COUNT(*) FROM memory_chunks WHERE path = :p"),
                                   {"p": _day(DM, 0)})).scalar_one()
    assert left == 0


async def test_index_survives_a_restart(engine: AsyncEngine, ws: Path) -> None:
    await index(engine, ws).sync()
    fresh = index(engine, ws)  # a new process: nothing in memory, everything in the DB
    stats = await fresh.sync()
    assert (stats.indexed, stats.hashed, stats.unchanged) == (0, 0, 6)
    assert "CANARYMEMORY" in await _texts(fresh, "dentist", "main", Scope.MAIN)


async def test_reindex_rebuilds_everything(engine: AsyncEngine, ws: Path) -> None:
    idx = index(engine, ws)
    await idx.sync()
    assert (await idx.reindex()).indexed == 6
    assert await reindex_memory(engine, ws) == 6
    async with engine.connect() as conn:
        files = (await conn.execute(text("SELECT COUNT(*) FROM memory_files"))).scalar_one()
    assert files == 6
    assert "CANARYMEMORY" in await _texts(idx, "dentist", "main", Scope.MAIN)


async def test_symlinks_are_not_indexed(engine: AsyncEngine, tmp_path: Path) -> None:
    secret = tmp_path / "outside.md"
    secret.write_text("OUTSIDESECRET\n", encoding="utf-8")
    (tmp_path / "ws/memory").mkdir(parents=True)
    (tmp_path / "ws/memory/2025-06-10.md").symlink_to(secret)
    idx = index(engine, tmp_path / "ws")
    assert (await idx.sync()).scanned == 0
    assert await idx.search("outsidesecret", "main", Scope.MAIN) == []


async def test_refresh_is_throttled_unless_dirty(engine: AsyncEngine, ws: Path) -> None:
    now = [100.0]
    idx = index(engine, ws, clock=lambda: now[0], refresh_interval_s=5.0)
    assert await idx.refresh() is not None  # first use
    assert await idx.refresh() is None
    now[0] += 6
    assert await idx.refresh() is not None
    idx.mark_dirty()
    assert await idx.refresh() is not None
    assert await idx.refresh() is None
    memory = ws / "MEMORY.md"
    memory.write_text("rewritten by write_file or exec\n", encoding="utf-8")
    os.utime(memory, ns=(memory.stat().st_atime_ns, memory.stat().st_mtime_ns + 10**9))
    stats = await idx.refresh()  # MEMORY.md changed: synced at once, no waiting
    assert stats is not None and stats.indexed == 1


async def test_scoped_memory_writes_own_log_and_finds_it(engine: AsyncEngine, ws: Path) -> None:
    idx = index(engine, ws, clock=lambda: 0.0)
    group = ScopedMemory(idx, ws, GROUP, Scope.SUB, now=lambda: NOW)
    await group.search("zebra")
    path = await group.append_log("the pangolin arrives on friday")
    assert path == ws / _day(GROUP, 0)
    hits = await group.search("pangolin")  # found at once: the write marked the index dirty
    assert [h["path"] for h in hits] == [_day(GROUP, 0)]
    assert set(hits[0]) == {"path", "start_line", "end_line", "snippet", "score"}
    main = ScopedMemory(idx, ws, "main", Scope.MAIN, now=lambda: NOW)
    assert await main.search("pangolin") == []


def test_chunks_follow_line_boundaries() -> None:
    lines = [f"{i:05d} " + "w" * (i % 97) for i in range(3000)]
    chunks = chunk_lines("\n".join(lines))
    assert all(len(c.body) <= CHUNK_CHARS for c in chunks)
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 3000
    for a, b in zip(chunks, chunks[1:]):
        assert b.start_line == a.end_line + 1
    for c in chunks:
        assert c.body.splitlines()[0].startswith(f"{c.start_line - 1:05d}")
    assert chunk_lines("\n\n  \n") == []


# --- memory tools ---------------------------------------------------------------------


def _ctx(ws: Path, key: str, scope: Scope, memory: ScopedMemory | None) -> ToolContext:
    return ToolContext(session_key=key, scope=scope, workspace=ws, memory=memory)


async def call(tool: Tool[Any], ctx: ToolContext, **kw: Any) -> str:
    return await tool.func(tool.input_model(**kw), ctx)


async def test_memory_tools_respect_scope(engine: AsyncEngine, ws: Path) -> None:
    idx = index(engine, ws)
    sub = _ctx(ws, GROUP, Scope.SUB, ScopedMemory(idx, ws, GROUP, Scope.SUB, now=lambda: NOW))
    main = _ctx(ws, "main", Scope.MAIN, ScopedMemory(idx, ws, "main", Scope.MAIN, now=lambda: NOW))

    out = await call(MEMORY_SEARCH, sub, query="zebra")
    assert "GROUPOWN" in out and "CANARY" not in out
    assert "CANARYMEMORY" in await call(MEMORY_SEARCH, main, query="dentist")

    with pytest.raises(ToolError, match="not available in this chat"):
        await call(MEMORY_GET, sub, path="MEMORY.md")
    with pytest.raises(ToolError, match="not available in this chat"):
        await call(MEMORY_GET, sub, path=_day("main", 0))
    with pytest.raises(ToolError, match="not available in this chat"):
        await call(MEMORY_GET, sub, path=_day(OTHER, 0))
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(MEMORY_GET, sub, path="../../etc/passwd")
    own = await call(MEMORY_GET, sub, path=_day(GROUP, 0), start_line=2, end_line=2)
    assert own.endswith("The group planned a zebra picnic GROUPOWN.")
    with pytest.raises(ToolError, match="not a memory file"):
        await call(MEMORY_GET, main, path="USER.md")
    assert "CANARYMEMORY" in await call(MEMORY_GET, main, path="MEMORY.md")

    with pytest.raises(ToolError, match="private to the owner"):
        await call(MEMORY_WRITE, sub, target="memory", text="hijack")
    assert "hijack" not in (ws / "MEMORY.md").read_text(encoding="utf-8")
    assert "appended to " + _day(GROUP, 0) == await call(MEMORY_WRITE, sub, text="group note")
    assert "group note" in (ws / _day(GROUP, 0)).read_text(encoding="utf-8")

    await call(MEMORY_WRITE, main, target="memory", text="- likes tea")
    assert (ws / "MEMORY.md").read_text(encoding="utf-8").endswith("- likes tea\n")
    await call(MEMORY_WRITE, main, target="memory", text="# Memory\nfresh", mode="replace")
    assert (ws / "MEMORY.md").read_text(encoding="utf-8") == "# Memory\nfresh\n"
    with pytest.raises(ToolError, match="append-only"):
        await call(MEMORY_WRITE, main, text="x", mode="replace")


async def test_memory_tools_without_a_backend(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, DM, Scope.SUB, None)
    with pytest.raises(ToolError, match="not available"):
        await call(MEMORY_SEARCH, ctx, query="x")
    out = await call(MEMORY_WRITE, ctx, text="a note")
    assert out.startswith("appended to memory/dms/telegram_77/")


# --- migration 0002 -------------------------------------------------------------------


def _downgrade_to_0001(conn: Any) -> None:
    from alembic import command

    from bot.storage.migrate import alembic_config

    config = alembic_config()
    config.attributes["connection"] = conn
    command.downgrade(config, "0001")


async def _memory_tables(eng: AsyncEngine) -> list[str]:
    async with eng.connect() as conn:
        if conn.dialect.name == "sqlite":
            sql = "SELECT name FROM sqlite_master"
        else:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        names = (await conn.execute(text(sql))).scalars().all()
    return sorted(n for n in names if n.startswith("memory_"))


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
async def test_migration_0002_creates_and_drops_the_tables(tmp_path: Path, dialect: str) -> None:
    migrate = pytest.importorskip("bot.storage.migrate")
    admin: AsyncEngine | None = None
    schema = f"migtest_{uuid.uuid4().hex[:12]}"
    if dialect == "sqlite":
        from bot.storage.engine import create_engine  # WAL + BEGIN IMMEDIATE, as in production

        eng = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    elif not PG_URL:
        pytest.skip("ROOST_TEST_POSTGRES_URL is not set; PostgreSQL half skipped")
    else:
        admin = create_async_engine(PG_URL)
        async with admin.begin() as conn:
            await conn.execute(text(f"CREATE SCHEMA {schema}"))
        eng = create_async_engine(PG_URL, connect_args={"server_settings": {"search_path": schema}})
    try:
        await migrate.upgrade(eng)
        assert "memory_chunks" in await _memory_tables(eng)
        _write(tmp_path / "ws", "MEMORY.md", "migrated okapi\n")
        idx = MemoryIndex(eng, tmp_path / "ws")
        await idx.sync()
        assert [h.path for h in await idx.search("okapi", "main", Scope.MAIN)] == ["MEMORY.md"]
        async with eng.begin() as conn:
            await conn.run_sync(_downgrade_to_0001)
        assert await _memory_tables(eng) == []
    finally:
        await eng.dispose()
        if admin is not None:
            async with admin.begin() as conn:
                await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            await admin.dispose()

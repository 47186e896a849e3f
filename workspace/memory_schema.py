"""DDL of the memory index, per dialect: the single source for migration 0002 and tests.

Changing a statement here changes what migration 0002 creates; ship schema changes as a new
migration instead of editing these.

    memory_files   one row per indexed file: path, owner, mtime_ns, size, sha256, day_ord
    memory_chunks  ~1,600-character pieces of a file on line boundaries (start/end line),
                   with the owner (whose scope may see it) and owner_tag, a one-token hash of it
    sqlite:        memory_chunks_fts, an FTS5 external-content table kept in step by triggers;
                   owner_tag is indexed there so a scoped search matches only its own rows
    postgresql:    memory_chunks.tsv, a generated tsvector with a GIN index
"""

from __future__ import annotations

import hashlib

from sqlalchemy import Connection, text

_FILES = """
CREATE TABLE IF NOT EXISTS memory_files (
    path TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    size BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    day_ord INTEGER,
    chunk_count INTEGER NOT NULL DEFAULT 0
)"""

_SQLITE: tuple[str, ...] = (
    _FILES,
    """
CREATE TABLE IF NOT EXISTS memory_chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    owner TEXT NOT NULL,
    owner_tag TEXT NOT NULL,
    day_ord INTEGER,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    body TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS ix_memory_chunks_path ON memory_chunks (path)",
    """
CREATE VIRTUAL TABLE IF NOT EXISTS memory_chunks_fts USING fts5(
    body, owner_tag, content='memory_chunks', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
)""",
    """
CREATE TRIGGER IF NOT EXISTS memory_chunks_ai AFTER INSERT ON memory_chunks BEGIN
    INSERT INTO memory_chunks_fts (rowid, body, owner_tag)
    VALUES (new.id, new.body, new.owner_tag);
END""",
    """
CREATE TRIGGER IF NOT EXISTS memory_chunks_ad AFTER DELETE ON memory_chunks BEGIN
    INSERT INTO memory_chunks_fts (memory_chunks_fts, rowid, body, owner_tag)
    VALUES ('delete', old.id, old.body, old.owner_tag);
END""",
    """
CREATE TRIGGER IF NOT EXISTS memory_chunks_au AFTER UPDATE ON memory_chunks BEGIN
    INSERT INTO memory_chunks_fts (memory_chunks_fts, rowid, body, owner_tag)
    VALUES ('delete', old.id, old.body, old.owner_tag);
    INSERT INTO memory_chunks_fts (rowid, body, owner_tag)
    VALUES (new.id, new.body, new.owner_tag);
END""",
)

_POSTGRESQL: tuple[str, ...] = (
    _FILES,
    """
CREATE TABLE IF NOT EXISTS memory_chunks (
    id BIGSERIAL PRIMARY KEY,
    path TEXT NOT NULL,
    owner TEXT NOT NULL,
    owner_tag TEXT NOT NULL,
    day_ord INTEGER,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    body TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', body)) STORED
)""",
    "CREATE INDEX IF NOT EXISTS ix_memory_chunks_path ON memory_chunks (path)",
    "CREATE INDEX IF NOT EXISTS ix_memory_chunks_owner ON memory_chunks (owner)",
    "CREATE INDEX IF NOT EXISTS ix_memory_chunks_tsv ON memory_chunks USING GIN (tsv)",
)

_DROP_SQLITE: tuple[str, ...] = (
    "DROP TRIGGER IF EXISTS memory_chunks_au",
    "DROP TRIGGER IF EXISTS memory_chunks_ad",
    "DROP TRIGGER IF EXISTS memory_chunks_ai",
    "DROP TABLE IF EXISTS memory_chunks_fts",
    "DROP TABLE IF EXISTS memory_chunks",
    "DROP TABLE IF EXISTS memory_files",
)

_DROP_POSTGRESQL: tuple[str, ...] = (
    "DROP TABLE IF EXISTS memory_chunks",
    "DROP TABLE IF EXISTS memory_files",
)


def owner_tag(owner: str) -> str:
    """A single FTS token standing for `owner` (letters and digits only)."""
    return "own" + hashlib.sha256(owner.encode("utf-8")).hexdigest()[:24]


def schema_statements(dialect: str) -> tuple[str, ...]:
    """CREATE statements (idempotent) for `dialect` ("sqlite" or "postgresql")."""
    if dialect == "sqlite":
        return _SQLITE
    if dialect == "postgresql":
        return _POSTGRESQL
    raise ValueError(f"the memory index supports sqlite and postgresql, not {dialect!r}")


def drop_statements(dialect: str) -> tuple[str, ...]:
    schema_statements(dialect)
    return _DROP_SQLITE if dialect == "sqlite" else _DROP_POSTGRESQL


def create_memory_tables(conn: Connection) -> None:
    """Create the index tables on a sync connection (in async code:
    `await conn.run_sync(create_memory_tables)`). Idempotent."""
    for statement in schema_statements(conn.dialect.name):
        conn.execute(text(statement))


def drop_memory_tables(conn: Connection) -> None:
    for statement in drop_statements(conn.dialect.name):
        conn.execute(text(statement))

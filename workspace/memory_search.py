"""The query side of the memory index: query terms, per-dialect SQL, ranking and snippets.

Score = text rank × recency weight. Text rank is FTS5's bm25 (negated, higher is better) on
SQLite and `ts_rank` on PostgreSQL; the weight is 1.0 for MEMORY.md and today's log and
falls smoothly with age (0.65 at 30 days, never below 0.3), so a newer log beats an older
one of similar relevance but a strong old match still surfaces. All terms must match
(AND); when that finds nothing, any term may (OR). English stop words are dropped from the
query on both dialects (as PostgreSQL's 'english' configuration does), so a query made only
of stop words finds nothing. Only the newest CANDIDATE_WINDOW matches are ranked, which
bounds the cost of broad queries. On SQLite the owner's tag is part of the MATCH, so FTS5 only
ranks the rows of that owner; the `owner =` condition stays as the authoritative filter.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection

from workspace.memory_schema import owner_tag

MAX_TERMS = 12
CANDIDATE_WINDOW = 1_000
"""At most this many matching chunks are ranked: the newest ones (chunks of recently
(re)indexed files have the highest ids). Bounds the cost of very broad queries."""
SNIPPET_CHARS = 320
RECENCY_FLOOR = 0.3
RECENCY_HALF_DAYS = 30.0

_WORD = re.compile(r"\w+", re.UNICODE)
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing don down during each few for
    from further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself no nor not now of off on once only or other
    our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was
    we were what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)

_WEIGHT = f"""(CASE WHEN c.day_ord IS NULL OR c.day_ord >= CAST(:today AS INTEGER) THEN 1.0
    ELSE {RECENCY_FLOOR} + {1 - RECENCY_FLOOR}
         / (1.0 + (CAST(:today AS INTEGER) - c.day_ord) / {RECENCY_HALF_DAYS}) END)"""

# Newest-first window: the rowid of the CANDIDATE_WINDOW-th newest match (FTS5 walks its
# doclists in rowid order and stops early, so this is cheap even for very common terms).
_SQLITE_FLOOR = """
SELECT rowid FROM memory_chunks_fts WHERE memory_chunks_fts MATCH :query
ORDER BY rowid DESC LIMIT 1 OFFSET :offset"""

_SQLITE_SQL = f"""
SELECT c.path, c.start_line, c.end_line, c.body,
       -bm25(memory_chunks_fts, 1.0, 0.0) * {_WEIGHT} AS score
FROM memory_chunks_fts JOIN memory_chunks AS c ON c.id = memory_chunks_fts.rowid
WHERE memory_chunks_fts MATCH :query AND memory_chunks_fts.rowid >= :floor
  AND c.owner = :owner
ORDER BY score DESC, c.path DESC, c.start_line
LIMIT :limit"""

_POSTGRESQL_SQL = f"""
WITH c AS (
    SELECT m.path, m.start_line, m.end_line, m.body, m.day_ord, m.tsv
    FROM memory_chunks AS m, websearch_to_tsquery('english', :query) AS q(query)
    WHERE m.tsv @@ q.query AND m.owner = :owner
    ORDER BY m.id DESC
    LIMIT :window
)
SELECT c.path, c.start_line, c.end_line, c.body,
       ts_rank(c.tsv, q.query) * {_WEIGHT} AS score
FROM c, websearch_to_tsquery('english', :query) AS q(query)
ORDER BY score DESC, c.path DESC, c.start_line
LIMIT :limit"""


@dataclass(frozen=True, slots=True)
class MemoryHit:
    path: str
    """Relative to the workspace root, e.g. memory/2025-01-31.md or MEMORY.md."""
    start_line: int
    end_line: int
    snippet: str
    score: float

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "snippet": self.snippet,
            "score": self.score,
        }


def query_terms(query: str) -> list[str]:
    """Lower-cased word tokens of a free-text query minus stop words, de-duplicated, at most
    MAX_TERMS."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word.strip("_") and word not in STOP_WORDS:
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def _match_text(dialect: str, terms: list[str], any_term: bool, owner: str) -> str:
    if dialect == "sqlite":
        # Every term is a quoted FTS5 string, so user text can never be FTS5 syntax.
        body = (" OR " if any_term else " AND ").join(f'"{t}"' for t in terms)
        return f'owner_tag : "{owner_tag(owner)}" AND body : ({body})'
    return (" or " if any_term else " ").join(terms)


async def run_search(
    conn: AsyncConnection,
    query: str,
    *,
    owner: str,
    today_ord: int,
    limit: int,
    window: int = CANDIDATE_WINDOW,
) -> list[MemoryHit]:
    """Best `limit` chunks owned by `owner` that match `query`, best first, ranked among
    the newest `window` matches."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    rows: Sequence[Row[Any]] = []
    for any_term in (False, True):
        if any_term and len(terms) == 1:
            break
        rows = await _ranked_rows(conn, terms, any_term, owner, today_ord, limit, window)
        if rows:
            break
    return [
        MemoryHit(
            r.path, r.start_line, r.end_line, make_snippet(r.body, terms), round(float(r.score), 6)
        )
        for r in rows
    ]


async def _ranked_rows(
    conn: AsyncConnection,
    terms: list[str],
    any_term: bool,
    owner: str,
    today_ord: int,
    limit: int,
    window: int,
) -> Sequence[Row[Any]]:
    match = _match_text(conn.dialect.name, terms, any_term, owner)
    params: dict[str, object] = {"query": match, "owner": owner, "today": today_ord, "limit": limit}
    if conn.dialect.name == "sqlite":
        floor = await conn.execute(text(_SQLITE_FLOOR), {"query": match, "offset": window - 1})
        params["floor"] = floor.scalar() or 0
        return (await conn.execute(text(_SQLITE_SQL), params)).all()
    params["window"] = window
    return (await conn.execute(text(_POSTGRESQL_SQL), params)).all()


def make_snippet(body: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """About `width` characters of `body` around the first place a term (or its stem)
    occurs, cut at spaces, with … where text was left out."""
    lowered = body.lower()
    pos = -1
    for term in terms:
        for probe in (term, term[:5] if len(term) > 5 else ""):
            if probe:
                found = lowered.find(probe)
                if found >= 0 and (pos < 0 or found < pos):
                    pos = found
                    break
    if len(body) <= width:
        return body.strip()
    start = max(0, (pos if pos >= 0 else 0) - width // 3)
    end = min(len(body), start + width)
    start = max(0, end - width)
    if start > 0:
        space = body.find(" ", start, start + 40)
        start = space + 1 if space >= 0 else start
    if end < len(body):
        space = body.rfind(" ", end - 40, end)
        end = space if space > start else end
    snippet = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + snippet + ("…" if end < len(body) else "")

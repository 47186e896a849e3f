"""The query side of the memory index: query terms, per-dialect SQL, ranking and snippets.

Score = text rank × recency weight. Text rank is FTS5's bm25 (negated, higher is better) on
SQLite and `ts_rank` on PostgreSQL; the weight is 1.0 for MEMORY.md and today's log and
falls smoothly with age (0.65 at 30 days, never below 0.3), so a newer log beats an older
one of similar relevance but a strong old match still surfaces. All terms must match
(AND); when that finds nothing, any term may (OR).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

MAX_TERMS = 12
SNIPPET_CHARS = 320
RECENCY_FLOOR = 0.3
RECENCY_HALF_DAYS = 30.0

_WORD = re.compile(r"\w+", re.UNICODE)
_PG_OPERATORS = frozenset({"or", "and", "not"})

_WEIGHT = f"""(CASE WHEN c.day_ord IS NULL OR c.day_ord >= CAST(:today AS INTEGER) THEN 1.0
    ELSE {RECENCY_FLOOR} + {1 - RECENCY_FLOOR}
         / (1.0 + (CAST(:today AS INTEGER) - c.day_ord) / {RECENCY_HALF_DAYS}) END)"""

_SQLITE_SQL = f"""
SELECT c.path, c.start_line, c.end_line, c.body,
       -bm25(memory_chunks_fts) * {_WEIGHT} AS score
FROM memory_chunks_fts JOIN memory_chunks AS c ON c.id = memory_chunks_fts.rowid
WHERE memory_chunks_fts MATCH :query AND c.owner = :owner
ORDER BY score DESC, c.path DESC, c.start_line
LIMIT :limit"""

_POSTGRESQL_SQL = f"""
SELECT c.path, c.start_line, c.end_line, c.body,
       ts_rank(c.tsv, q.query) * {_WEIGHT} AS score
FROM memory_chunks AS c, websearch_to_tsquery('english', :query) AS q(query)
WHERE c.tsv @@ q.query AND c.owner = :owner
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
    """Lower-cased word tokens of a free-text query, de-duplicated, at most MAX_TERMS."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(query.lower()):
        if word != "_" * len(word):
            seen.setdefault(word, None)
    return list(seen)[:MAX_TERMS]


def _match_text(dialect: str, terms: list[str], any_term: bool) -> str:
    if dialect == "sqlite":
        # Every term is a quoted FTS5 string, so user text can never be FTS5 syntax.
        return (" OR " if any_term else " AND ").join(f'"{t}"' for t in terms)
    words = [t for t in terms if t not in _PG_OPERATORS]
    return (" or " if any_term else " ").join(words)


async def run_search(
    conn: AsyncConnection, query: str, *, owner: str, today_ord: int, limit: int
) -> list[MemoryHit]:
    """Best `limit` chunks owned by `owner` that match `query`, best first."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    dialect = conn.dialect.name
    sql = text(_SQLITE_SQL if dialect == "sqlite" else _POSTGRESQL_SQL)
    rows: list[tuple[str, int, int, str, float]] = []
    for any_term in (False, True):
        if any_term and len(terms) == 1:
            break
        match = _match_text(dialect, terms, any_term)
        if not match:
            return []
        params = {"query": match, "owner": owner, "today": today_ord, "limit": limit}
        rows = [tuple(r) for r in (await conn.execute(sql, params)).all()]  # type: ignore[misc]
        if rows:
            break
    return [
        MemoryHit(path, start, end, make_snippet(body, terms), round(float(score), 6))
        for path, start, end, body, score in rows
    ]


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

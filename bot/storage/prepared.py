"""The hot path's statements, compiled once and run straight on the sqlite3 connection.

Every message runs about a dozen short statements through `bot.storage.writer.SqliteRunner`.
SQLAlchemy's `Connection.execute` spent several times each statement's own SQLite time on
it (cache-key lookup, an execution context, parameter processing, a CursorResult): about a
quarter of the CPU per message in bench/bench_core.py. Here a statement object executed a
second time (the hot path's are built once, at import) is compiled once, by SQLAlchemy, for
the parameter keys it is given; from then on its parameters go through the bind processors
SQLAlchemy would apply, in the compiled order, straight to the sqlite3 connection, and a
SELECT's rows come back as a SQLAlchemy `Result` (`IteratorResult`) with the columns' own
result processors, keys and lookup objects, as `Connection.execute` would give them.

Only what needs nothing more is taken: a SELECT or an INSERT/UPDATE/DELETE without
RETURNING, column defaults computed in Python, expanding or literal parameters, a schema
translation or execution options (bar the ORM's `synchronize_session`), while no execution
event listener is on the connection or its engine (looked up at the start of each batch of
bodies: tracing sees every statement). Everything else goes to `Connection.execute`
unchanged. Errors keep SQLAlchemy's types: a driver error is wrapped as `Connection.execute`
wraps it (`DBAPIError` subclasses), and parameters a bind processor refuses go to
`Connection.execute`, which raises its own error for them (nothing was executed yet).
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.selectable import Select

KEPT = 256
"""Compiled statements kept (the hot path has a few dozen), and once-seen ones remembered."""

_IGNORED_OPTIONS = frozenset({"synchronize_session"})
"""Execution options that mean nothing to a Core statement (the ORM's)."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    compiled: SQLCompiler
    sql: str
    order: tuple[tuple[str, Callable[[Any], Any] | None], ...]
    """Each positional parameter's name and bind processor (None: passed as it is)."""
    is_insert: bool
    columns: SimpleResultMetaData | None
    """A SELECT's result columns (keys, lookup objects, result processors); None for DML."""
    width: int
    """How many columns the SELECT returns."""


class DMLResult:
    """What a DML statement's caller reads: `rowcount`, and an INSERT's `inserted_primary_key`."""

    __slots__ = ("rowcount", "_lastrowid", "_prepared", "_params")

    def __init__(self, rowcount: int, lastrowid: int | None, prepared: _Prepared, params: dict[str, Any]) -> None:
        self.rowcount = rowcount
        self._lastrowid = lastrowid
        self._prepared = prepared
        self._params = params

    @property
    def inserted_primary_key(self) -> Any:
        if not self._prepared.is_insert:
            raise AttributeError("inserted_primary_key: not an INSERT")
        return self._prepared.compiled._inserted_primary_key_from_lastrowid_getter(self._lastrowid, self._params)


class PreparedConnection:
    """A `Connection` whose `execute` runs eligible statements straight on the driver; every
    other attribute is the wrapped connection's. One per runner connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._dialect = conn.dialect
        self._traced = True
        """Cursor-level listeners on the connection or its engine: see `begin_batch`."""
        self._prepared: OrderedDict[tuple[int, tuple[str, ...], bool], tuple[Any, _Prepared | None]] = OrderedDict()
        self._seen: OrderedDict[int, Any] = OrderedDict()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def begin_batch(self) -> None:
        """Looks for tracing listeners once per batch of bodies (they run at one go), not
        per statement: SQLAlchemy's listener lookups cost a fifth of a prepared execute."""
        self._traced = _traced(self._conn)

    def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        if (
            execution_options is not None
            or not isinstance(statement, (UpdateBase, Select))
            or not _IGNORED_OPTIONS.issuperset(statement._execution_options)
            or self._conn._execution_options
            or self._traced
        ):
            return self._conn.execute(statement, parameters, execution_options=execution_options)
        rows: Sequence[Mapping[str, Any]]
        many = False
        if parameters is None:
            rows = ({},)
        elif isinstance(parameters, Mapping):
            rows = (parameters,)
        elif isinstance(parameters, Sequence) and parameters and all(isinstance(r, Mapping) for r in parameters):
            rows = parameters
            many = len(rows) > 1
        else:
            return self._conn.execute(statement, parameters)
        prepared = self._lookup(statement, rows[0], many)
        if prepared is None or (many and prepared.columns is not None):
            return self._conn.execute(statement, parameters)
        try:
            constructed = [prepared.compiled.construct_params(row, escape_names=False) for row in rows]
            values = [tuple(p(c[k]) if p is not None else c[k] for k, p in prepared.order) for c in constructed]
        except Exception:
            # Nothing ran yet: SQLAlchemy processes them again and raises its own error.
            return self._conn.execute(statement, parameters)
        # Looked up each time: SQLAlchemy may have replaced an invalidated connection.
        driver: sqlite3.Connection = self._conn.connection.driver_connection  # type: ignore[assignment]
        try:
            if many:
                cursor = driver.executemany(prepared.sql, values)
            else:
                cursor = driver.execute(prepared.sql, values[0])
        except sqlite3.Error as exc:
            raise DBAPIError.instance(
                prepared.sql, values if many else values[0], exc, sqlite3.Error, dialect=self._dialect, ismulti=many
            ) from exc
        if prepared.columns is None:
            return DMLResult(cursor.rowcount, cursor.lastrowid, prepared, constructed[0])
        if cursor.description is None or len(cursor.description) != prepared.width:
            # Not the columns it was compiled for: a SELECT changes nothing, so SQLAlchemy
            # runs it again and matches what came back by name.
            cursor.close()
            self._prepared[(id(statement), tuple(rows[0]), many)] = (statement, None)
            return self._conn.execute(statement, parameters)
        return IteratorResult(prepared.columns, iter(cursor))

    def _lookup(self, statement: Any, first: Mapping[str, Any], many: bool) -> _Prepared | None:
        key = (id(statement), tuple(first), many)
        found = self._prepared.get(key)
        if found is not None and found[0] is statement:
            return found[1]
        if self._seen.get(id(statement)) is not statement:
            # First sighting: a statement built per call is never seen again, and compiling
            # it here would cost more than SQLAlchemy's own cache.
            self._seen[id(statement)] = statement
            while len(self._seen) > KEPT:
                self._seen.popitem(last=False)
            return None
        prepared = _prepare(statement, first, many, self._dialect)
        self._prepared[key] = (statement, prepared)  # the statement kept: its id stays its own
        while len(self._prepared) > KEPT:
            self._prepared.popitem(last=False)
        return prepared


def _traced(conn: Connection) -> bool:
    dispatch = conn.dispatch
    return bool(
        dispatch.before_execute or dispatch.after_execute
        or dispatch.before_cursor_execute or dispatch.after_cursor_execute
        or conn.dialect.dispatch.handle_error
    )  # fmt: skip


def _prepare(statement: Any, first: Mapping[str, Any], many: bool, dialect: Any) -> _Prepared | None:
    try:
        # As Connection.execute compiles it: keys sorted, executemany or not.
        compiled = statement.compile(dialect=dialect, column_keys=sorted(first), for_executemany=many)
        dml = compiled.isinsert or compiled.isupdate or compiled.isdelete
        if not compiled.positional or compiled.isplaintext or (dml and isinstance(statement, Select)):
            return None
        if (
            compiled.insert_prefetch or compiled.update_prefetch
            or compiled.literal_execute_params or compiled.post_compile_params
            or compiled.implicit_returning or compiled.effective_returning
            or compiled.schema_translate_map
            or (many and compiled.isinsert and compiled._insertmanyvalues)
        ):  # fmt: skip
            return None
        processors = compiled._bind_processors
        order = tuple((name, processors.get(name)) for name in compiled.positiontup)
        columns: SimpleResultMetaData | None = None
        width = 0
        if not dml:
            result_columns = compiled._result_columns
            keys = [entry.keyname for entry in result_columns]
            if (
                not result_columns or len(set(keys)) != len(keys)
                or not compiled._ordered_columns or compiled._textual_ordered_columns
                or compiled._ad_hoc_textual or compiled._loose_column_name_matching
            ):  # fmt: skip
                return None
            columns = SimpleResultMetaData(
                keys,
                extra=[entry.objects for entry in result_columns],
                _processors=[entry.type._cached_result_processor(dialect, None) for entry in result_columns],
            )
            width = len(keys)
        return _Prepared(compiled, compiled.string, order, bool(compiled.isinsert), columns, width)
    except Exception:
        return None  # not ours to judge: Connection.execute says what is wrong with it

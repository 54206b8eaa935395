"""Which tables a model's SQL reads, found with a real SQL parser (sqlglot, DuckDB dialect).

Dependencies are never hand-kept: a model's compiled SQL (refs.py: `{{ ref('x') }}` -> `analytics.x`,
`{{ source('lms', 'x') }}` -> `lms.x`) reads `lms.<raw table>` (the synced warehouse tables) and
`analytics.<model>` (other models), always schema-qualified, so the SQL runs as compiled in the warehouse.
CTE names are not tables.

What a SQL text reads is a pure function of the text, its file's path (in the problems it states), this module and
the sqlglot release, so `read_sql` keeps its findings in a file (`ReadingCache`), as dbt's partial parsing keeps its
manifest: a process whose models did not change builds the definitions without importing sqlglot (~30 MiB and
~0.1 s of every process that loads the code location).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.analytics.errors import ModelError

if TYPE_CHECKING:
    from sqlglot import exp

log = logging.getLogger("lessonsync.analytics")
RAW_SCHEMA = "lms"
MODEL_SCHEMA = "analytics"


@dataclass(frozen=True, order=True)
class TableRef:
    """A table a model reads: `schema.name`, schema being `lms` (raw) or `analytics` (a model)."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class SqlReading:
    """What a model's rendered SQL reads: its tables, or why it is no model's SQL, and whether it reads the
    build's `as_of`, or the clock, another session variable or randomness (time_reads)."""

    tables: frozenset[TableRef]
    problem: str | None  # the ModelError of parse_select or referenced_tables; then `tables` is empty
    reads_as_of: bool
    reads_clock: bool


def read_sql(sql: str, path: Path) -> SqlReading:
    """The reading of `sql` (a model's rendered SQL, from the file `path`): from the cache when this text of this
    file was read before by the same analysis, else parsed now and added to the cache."""
    cache = reading_cache()
    key = cache.key(sql, path)
    found = cache.get(key)
    if found is None:
        found = _parsed_reading(sql, path)
        cache.put(key, found)
    return found


def save_readings() -> None:
    """Write the readings added since the cache file was read (once a project is read: one write, not one a model)."""
    reading_cache().save()


def _parsed_reading(sql: str, path: Path) -> SqlReading:
    """The SQL parsed once: its tables and time reads from the one query; for SQL that is no model's, its time
    reads from whatever first statement parses (time_reads)."""
    try:
        query = parse_select(sql, path)
        tables = frozenset(referenced_tables(query, path))
    except ModelError as error:
        return SqlReading(frozenset(), str(error), *time_reads(sql))
    return SqlReading(tables, None, *_time_reads_of(query))


def parse_select(sql: str, path: Path) -> exp.Query:
    """The one SELECT (or set operation / WITH ... SELECT) a model file must hold."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError, SqlglotError

    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as error:
        first = error.errors[0] if error.errors else {}
        at = f" at line {first['line']}, column {first['col']} of the rendered SQL" if "line" in first else ""
        what = str(first.get("description", error)).split(" <Token", 1)[0]
        raise ModelError(
            f"{path}: the SQL does not parse{at} ({what} {first.get('highlight', '')!r}); fix it"
        ) from None
    except SqlglotError as error:
        raise ModelError(f"{path}: the SQL does not parse: {error}; fix it") from None
    if len(statements) != 1:
        raise ModelError(f"{path}: holds {len(statements)} statements; a model is exactly one SELECT")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        kind = type(statement).__name__.upper()
        raise ModelError(f"{path}: is a {kind} statement; a model is exactly one SELECT (the build creates it)")
    return statement


def referenced_tables(query: exp.Query, path: Path) -> set[TableRef]:
    """Every schema-qualified table the query reads; unqualified names must be CTEs of the query."""
    from sqlglot import exp

    # Table functions that read no table (and so hide no dependency); file readers like read_parquet are refused.
    allowed_table_functions = (exp.GenerateSeries, exp.Unnest)
    cte_names = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    refs: set[TableRef] = set()
    for table in query.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            if isinstance(table.this, allowed_table_functions):
                continue
            raise ModelError(
                f"{path}: reads from the table function {table.this.sql('duckdb')!r}; models may read only "
                f"{RAW_SCHEMA}.* and {MODEL_SCHEMA}.* tables, so that their lineage is known"
            )
        if table.catalog:
            raise ModelError(f"{path}: references {table.sql('duckdb')!r}; drop the database qualifier")
        if not table.db:
            if table.name in cte_names:
                continue
            raise ModelError(
                f"{path}: references the unqualified table {table.name!r}; write {RAW_SCHEMA}.{table.name} "
                f"for a synced table or {MODEL_SCHEMA}.{table.name} for a model"
            )
        refs.add(TableRef(table.db, table.name))
    return refs


def check_known(ref: TableRef, where: str, sources: dict[str, str], models: set[str], self_name: str) -> None:
    """`ref` must be a declared raw table or another model; else an error naming `where` and the table."""
    if ref.schema == RAW_SCHEMA and ref.name in sources:
        return
    if ref.schema == MODEL_SCHEMA and ref.name in models and ref.name != self_name:
        return
    if ref.schema == MODEL_SCHEMA and ref.name == self_name:
        raise ModelError(f"{where}: the model reads itself ({ref}); a model cannot depend on its own table")
    raise ModelError(
        f"{where}: references unknown table {ref}. Known raw tables: "
        f"{', '.join(f'{RAW_SCHEMA}.{s}' for s in sorted(sources))}; known models: "
        f"{', '.join(f'{MODEL_SCHEMA}.{m}' for m in sorted(models))} (ref('<model>') and source('{RAW_SCHEMA}', "
        f"'<table>') compile to these). Fix the name, add the model, or declare the raw table in sources.yml"
    )


# What reads the clock rather than the build's inputs: sqlglot's function names besides its expression classes.
_CLOCK_FUNCTIONS = frozenset({"now", "get_current_timestamp", "get_current_time", "transaction_timestamp"})


def time_reads(sql: str) -> tuple[bool, bool]:
    """Whether the SQL reads the build's `as_of` (`getvariable('as_of')`, what var('as_of') renders to), and
    whether it reads the clock, another session variable or randomness. SQL that does not parse is no model
    anyway: neither."""
    import sqlglot

    try:
        query = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return False, False
    return _time_reads_of(query)


def _time_reads_of(query: exp.Expr) -> tuple[bool, bool]:
    from sqlglot import exp

    clock_expressions = (exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Rand, exp.Uuid)
    as_of = clock = False
    for node in query.walk():
        if isinstance(node, exp.Anonymous) and str(node.name).lower() == "getvariable":
            argument = node.expressions[0] if node.expressions else None
            if isinstance(argument, exp.Literal) and argument.this == "as_of":
                as_of = True
            else:
                clock = True
        elif isinstance(node, clock_expressions) or (
            isinstance(node, exp.Anonymous) and str(node.name).lower() in _CLOCK_FUNCTIONS
        ):
            clock = True
    return as_of, clock


# Entries kept in the cache file: every model of a few projects, each in its current and some earlier versions.
CACHE_ENTRIES = 2000


class ReadingCache:
    """Readings by key (the text, its path and the analysis: this module's source and the sqlglot release), in one
    JSON file under the cache directory. The file is only a memo: one that cannot be read or written is ignored
    (the SQL is parsed), and it is replaced whole (write to a temp file, then rename) so that a process never
    reads another's half-written file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, dict[str, Any]] | None = None
        self._added = False  # entries not yet in the file
        self._analysis = _analysis_version()

    def key(self, sql: str, path: Path) -> str:
        return hashlib.sha256("\0".join((self._analysis, str(path), sql)).encode()).hexdigest()

    def get(self, key: str) -> SqlReading | None:
        entry = self._loaded().get(key)
        if entry is None:
            return None
        try:
            tables = frozenset(TableRef(str(schema), str(name)) for schema, name in entry["tables"])
            problem = entry["problem"]
            return SqlReading(
                tables, None if problem is None else str(problem), bool(entry["as_of"]), bool(entry["clock"])
            )
        except (KeyError, TypeError, ValueError):  # an entry of another shape: read again
            return None

    def put(self, key: str, reading: SqlReading) -> None:
        entries = self._loaded()
        entries.pop(key, None)  # re-inserted last: the oldest entries go first when the file is full
        entries[key] = {
            "tables": sorted([t.schema, t.name] for t in reading.tables),
            "problem": reading.problem,
            "as_of": reading.reads_as_of,
            "clock": reading.reads_clock,
        }
        while len(entries) > CACHE_ENTRIES:
            del entries[next(iter(entries))]
        self._added = True

    def save(self) -> None:
        if self._added and self._entries is not None:
            self._write(self._entries)
            self._added = False

    def _loaded(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.debug("the model lineage cache %s is not read (%s); the models are parsed", self.path, error)
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _write(self, entries: dict[str, dict[str, Any]]) -> None:
        written: Path | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, name = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            written = Path(name)
            os.fchmod(handle, 0o644)  # readable by the deployment's other processes, as the models themselves
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entries, out)
            os.replace(written, self.path)
        except OSError as error:  # a read-only home, a full disk: the next process parses again
            log.debug("the model lineage cache %s is not written (%s)", self.path, error)
            if written is not None:
                written.unlink(missing_ok=True)


@cache
def reading_cache() -> ReadingCache:
    """This process's cache: lessonsync/lineage.json under the user's cache directory ($XDG_CACHE_HOME, else
    ~/.cache), where dbt-like tools keep what they can compute again."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return ReadingCache(Path(base) / "lessonsync" / "lineage.json")


def _analysis_version() -> str:
    """This module's source and the sqlglot release: a reading cached by another analysis is not used."""
    try:
        parser = version("sqlglot")
    except PackageNotFoundError:
        parser = "unknown"
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16] + "/sqlglot " + parser

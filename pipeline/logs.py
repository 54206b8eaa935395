"""The console of LessonSync's commands: one format for every logger of the process (ours, Dagster's run events,
uvicorn, warnings), text for people or JSON for a log pipeline (LESSONSYNC_LOG_FORMAT), every secret redacted.

Text: `2026-12-01 02:00:00,123 INFO    lessonsync.source: message`; a line from a run adds `[run 1a2b3c4d step]`
and, for a Dagster event, its type. JSON: one object per line with `time`, `level`, `logger`, `message`, the run's
`run_id`, `job`, `step_key` and `dagster_event` when there is one, and the scalar fields the call passed as `extra`
(progress lines: `stream`, `event`, `pages`, `rows`, `rate`).

A run's lines reach the console once: Dagster hands the records of the loggers it manages (`lessonsync`, in the
shipped dagster.yaml) to the run's loggers, so the root handler leaves every record a run has taken
(`dagster_meta`) to the run's console logger (pipeline/defs/operations/console.py), which writes through the same sink."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
TEXT_LAYOUT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# The logger a record of ours was made on, kept through Dagster's hand-over (which re-logs it under its own name).
ORIGIN_ATTR = "lessonsync_logger"
DAGSTER_META_ATTR = "dagster_meta"  # what Dagster's log handler attaches to a record a run has taken
# Record attributes that are neither the standard ones nor fields worth a JSON key (uvicorn's color_message: its
# message again, with terminal colours).
_INTERNAL = {ORIGIN_ATTR, DAGSTER_META_ATTR, "dagster_event", "dagster_event_batch_metadata", "message", "asctime"}
_INTERNAL |= {"color_message"}
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__)

# Secrets that no line may carry, besides those the patterns below catch (the app secret, webhook credentials, the
# URLs of the settings): registered when a command reads its settings.
_SECRETS: set[str] = set()
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*:)[^\s/@]+@")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# Dagster names a multi-asset once per output in "Dependencies for step X failed: ['lms_raw', 'lms_raw', ...]".
_QUOTED_LIST = re.compile(r"\[('[^'\]]*'(?:, '[^'\]]*')+)\]")


def redact(text: str) -> str:
    """`text` without a secret: registered values, URL passwords and JWTs (the platform's tokens) become ***."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _JWT.sub("***", text)


def register_secrets(values: Iterable[str | None]) -> None:
    """Values redacted from every line from now on (short ones are not: they would blank ordinary words)."""
    _SECRETS.update(v for v in values if v and len(v) >= 4)


def register_settings_secrets(settings: Any) -> None:
    """The secrets of a Settings: the app secret, the URLs that carry credentials, the platform address's password."""
    from urllib.parse import urlsplit

    names = ("app_secret", "alert_webhook_url", "dagster_postgres_url", "inbox_url", "iceberg_catalog_url")
    values = [getattr(settings, name, None) for name in names]
    register_secrets(value.get_secret_value() for value in values if value is not None)
    with contextlib.suppress(ValueError):  # not an address: the settings say so
        register_secrets([urlsplit(str(settings.base_url)).password])


# Dagster names every selected output a step did not yield: after a no-change sync, ~100 checks of models not built.
_UNYIELDED = re.compile(r"did not yield or return expected outputs \{([^}]*)\}")
_NAMES_SHOWN = 3


def shortened_unyielded(text: str) -> str:
    """Dagster's "did not yield or return expected outputs {...}" with the count and the first few names (sorted)."""

    def shorten(match: re.Match[str]) -> str:
        names = sorted(name.strip().strip("'") for name in match.group(1).split(",") if name.strip())
        more = f", and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
        return f"did not yield or return {len(names)} expected output(s): {', '.join(names[:_NAMES_SHOWN])}{more}"

    return _UNYIELDED.sub(shorten, text)


def distinct_list_items(text: str) -> str:
    """ "['a', 'a', 'b']" -> "['a', 'b']" wherever a message quotes a list of names."""

    def distinct(match: re.Match[str]) -> str:
        items = list(dict.fromkeys(match.group(1).split(", ")))
        return "[" + ", ".join(items) + "]"

    return _QUOTED_LIST.sub(distinct, text)


# Records


def _run_meta(record: logging.LogRecord) -> Mapping[str, Any] | None:
    meta = getattr(record, DAGSTER_META_ATTR, None)
    return meta if isinstance(meta, Mapping) else None


def _event_type(meta: Mapping[str, Any]) -> str | None:
    """The Dagster event's type as the UI names it (RUN_FAILURE, not the stored PIPELINE_FAILURE)."""
    event = meta.get("dagster_event")
    value = getattr(event, "event_type_value", None)
    return value.replace("PIPELINE_", "RUN_") if isinstance(value, str) else None


def event_error(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(class, message) of the root cause a Dagster event carries (a step's or run's failure), None without one."""
    data = getattr(meta.get("dagster_event"), "event_specific_data", None)
    error = getattr(data, "error", None)
    if error is None:
        return None
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return str(getattr(error, "cls_name", "") or ""), error_text(error)


def error_text(error: Any) -> str:
    """The message of a Dagster error record, without its class path (without_class_path)."""
    return without_class_path(str(getattr(error, "message", "") or "").strip())


_CLASS_PATH = re.compile(r"^(?P<path>(?:[A-Za-z_]\w*\.)+)(?P<cls>[A-Z]\w*): ")


def without_class_path(message: str) -> str:
    """An exception's message as Dagster records it ('module.Class: text'), for a person: our own errors and
    Dagster's Failure are their text alone (written to stand alone), another keeps its class name without the
    module ('IOException: text'); a message without a class path is left as it is."""
    match = _CLASS_PATH.match(message)
    if match is None:
        return message
    rest = message[match.end() :]
    own = match.group("path").startswith("pipeline.") or match.group("cls") == "Failure"
    return rest if own else f"{match.group('cls')}: {rest}"


def _message(record: logging.LogRecord) -> str:
    meta = _run_meta(record)
    if meta is None:
        return record.getMessage()
    return shortened_unyielded(distinct_list_items(str(meta.get("orig_message") or "")))


def _logger_name(record: logging.LogRecord) -> str:
    return str(getattr(record, ORIGIN_ATTR, None) or record.name)


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The scalar `extra` fields of a log call."""
    return {
        key: value
        for key, value in record.__dict__.items()
        if key not in _STANDARD and key not in _INTERNAL and isinstance(value, str | int | float | bool | None)
    }


class TextFormatter(logging.Formatter):
    """One line per record: time, level, logger, then `[run step] EVENT:` for a run's lines, then the message."""

    def __init__(self) -> None:
        super().__init__(TEXT_LAYOUT)

    def format(self, record: logging.LogRecord) -> str:
        meta = _run_meta(record)
        message = _message(record)
        if meta is not None:
            where = " ".join(p for p in (f"run {str(meta.get('run_id') or '')[:8]}", meta.get("step_key")) if p)
            event = _event_type(meta)
            error = event_error(meta)
            message = f"[{where}] " + (f"{event}: " if event else "") + message
            if error is not None:
                message = message.rstrip(".") + f": {error[1]}"
        line = self.formatTime(record) + f" {record.levelname:<7} {_logger_name(record)}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": _logger_name(record),
            "message": _message(record),
        }
        meta = _run_meta(record)
        if meta is not None:
            entry.update(run_id=meta.get("run_id"), job=meta.get("job_name"), step_key=meta.get("step_key"))
            if event := _event_type(meta):
                entry["dagster_event"] = event
            if error := event_error(meta):
                entry["error_class"], entry["error"] = error
        entry.update({k: v for k, v in record_fields(record).items() if k not in entry})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(_redacted(entry), ensure_ascii=False, default=str)


def _redacted(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: redact(value) if isinstance(value, str) else value for key, value in entry.items()}


# The console


class Console:
    """Where formatted lines go, one at a time across threads: the process's stderr as it is when a line is
    written, or the `sink` a live progress display sets (it prints them above itself)."""

    def __init__(self, log_format: LogFormat = "text") -> None:
        self.log_format: LogFormat = log_format
        self.formatter: logging.Formatter = formatter_for(log_format)
        self.hide: Callable[[logging.LogRecord], bool] | None = None  # e.g. progress lines a live display shows
        self.sink: Callable[[str], None] | None = None
        self._lock = threading.Lock()

    def write(self, record: logging.LogRecord) -> None:
        if self.hide is not None and self.hide(record):
            return
        line = self.formatter.format(record)
        with self._lock:
            if self.sink is not None:
                self.sink(line)
                return
            stream: TextIO = sys.stderr
            stream.write(line + "\n")
            stream.flush()


class ConsoleHandler(logging.Handler):
    """A handler writing to the process's Console. On the root logger it leaves the records a Dagster run has taken
    to that run's console logger (`of_runs=False`), which writes them with their run and step."""

    def __init__(self, console: Console, *, of_runs: bool) -> None:
        super().__init__()
        self.console = console
        self.of_runs = of_runs

    def emit(self, record: logging.LogRecord) -> None:
        if not self.of_runs and _run_meta(record) is not None:
            return
        if record.exc_info and record.exc_info[0] is KeyboardInterrupt:
            # a stop interrupting a library that logs what interrupted it (SQLAlchemy closing a connection):
            # the command's FAILED line says it was stopped; that library's traceback is not an error
            return
        try:
            self.console.write(record)
        except Exception:  # noqa: BLE001 - logging never fails the caller
            self.handleError(record)


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


_console: Console | None = None


def console() -> Console:
    """The process's console: the one configure_logging set up, else one in LESSONSYNC_LOG_FORMAT (a Dagster run
    launched by the daemon that names LessonSync's console logger)."""
    global _console
    if _console is None:
        _console = Console(log_format_from_environment())
    return _console


def configure_logging(log_format: LogFormat, *, verbose: bool = False) -> Console:
    """Every record of the process, on stderr, in `log_format`: the root logger's only handler. Idempotent (a
    command calls it again once its settings are read)."""
    global _console
    target = console()
    target.log_format, target.formatter = log_format, formatter_for(log_format)
    _console = target
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(ConsoleHandler(target, of_runs=False))
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not verbose:  # per-request, migration and FileIO-per-table lines are noise; lessonsync.source logs progress
        for noisy in ("httpx", "alembic", "pyiceberg"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)  # Python warnings (Dagster's among them) as log records, in the same format
    _remember_origin()
    return target


def _remember_origin() -> None:
    """Records of our loggers carry the logger's name as a field, so a line Dagster re-logs from a run under its own
    logger still names ours."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "lessonsync_origin", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        name = record.name
        if isinstance(name, str) and (name == "lessonsync" or name.startswith("lessonsync.")):
            setattr(record, ORIGIN_ATTR, name)
        return record

    factory.lessonsync_origin = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def log_format_from_environment() -> LogFormat:
    """LESSONSYNC_LOG_FORMAT from the environment or .env, read before the settings (which validate it and say
    when it is wrong): an unknown value is `text` until then."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class _LogFormatOnly(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="LESSONSYNC_", env_file=".env", extra="ignore")
        log_format: str = "text"

    value = _LogFormatOnly().log_format.strip().lower()
    return "json" if value == "json" else "text"


def print_result(text: str, **fields: Any) -> None:
    """A command's result line on stdout: as it is, or as a JSON object (`message` and `fields`) in json format."""
    if console().log_format == "json":
        entry = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": "INFO"}
        entry |= {"logger": "lessonsync.cli", "message": text, **fields}
        print(json.dumps(_redacted(entry), ensure_ascii=False, default=str), flush=True)
    else:
        print(redact(text), flush=True)

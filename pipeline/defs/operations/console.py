"""LessonSync's console logger for Dagster runs: a run's events and lines in the format of every other line of the
process (pipeline/logs.py: text or LESSONSYNC_LOG_FORMAT=json), written through the same console, so a live
progress display or a log pipeline sees one stream. `lessonsync sync` and the demo run with it; a run launched
from the UI or the daemon keeps Dagster's console logger unless its run config names this one:

    loggers:
      lessonsync:
        config:
          log_level: INFO
"""

from __future__ import annotations

import logging

from dagster import Field, InitLoggerContext, colored_console_logger, logger

from pipeline.logs import ConsoleHandler, console

CONSOLE_LOGGER = "lessonsync"


@logger(
    config_schema={"log_level": Field(str, is_required=False, default_value="INFO")},
    description="A run's events and log lines in LessonSync's console format (LESSONSYNC_LOG_FORMAT), run id "
    "and step included, secrets redacted.",
)
def lessonsync_console_logger(init_context: InitLoggerContext) -> logging.Logger:
    level = str(init_context.logger_config["log_level"]).upper()
    # Not in the logging hierarchy: the run's records reach the console here only, once.
    run_logger = logging.Logger("dagster", level)
    run_logger.addHandler(ConsoleHandler(console(), of_runs=True))
    return run_logger


# Dagster's console logger stays the default of every job (and a name run configs may use); ours is chosen by name.
LOGGERS = {"console": colored_console_logger, CONSOLE_LOGGER: lessonsync_console_logger}

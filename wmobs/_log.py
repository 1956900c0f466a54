"""wmobs' logger: quiet unless the application asks.

wmobs logs structured events (``wmobs.query_started``, ``wmobs.engine``, per micro-batch
``wmobs.progress`` at debug, ...) and never configures logging. Where they go is decided at
each call, by what the application set up:

- an application that configured structlog (``structlog.configure``) gets them from
  ``structlog.get_logger("wmobs")``, as it configured it;
- otherwise they go to the standard library's ``logging.getLogger("wmobs")``, whose level the
  application sets (``logging.getLogger("wmobs").setLevel(logging.DEBUG)``, or
  ``logging.basicConfig(level=logging.INFO)``). With no logging configured at all, Python shows
  warnings and errors only: no line per micro-batch, no info. (structlog's own default, used
  unconfigured, would print every event, debug included.)

Start, stop, failure and the engine a policy runs on are info; per-batch detail is debug.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["get_logger"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


class _Logger:
    """A structlog-style logger (``log.info("event", key=value)``) that chooses its output
    per call (module documentation)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._stdlib = logging.getLogger(name)

    def __getattr__(self, level: str) -> Any:
        number = _LEVELS.get(level)
        if number is None:
            raise AttributeError(level)

        def log(event: str, *, exc_info: Any = None, **fields: Any) -> None:
            import structlog

            if structlog.is_configured():
                method = getattr(structlog.get_logger(self._name), level)
                if exc_info is None:
                    method(event, **fields)
                else:
                    method(event, exc_info=exc_info, **fields)
                return
            if self._stdlib.isEnabledFor(number):
                text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
                self._stdlib.log(number, "%s", text, exc_info=exc_info)

        return log


def get_logger(name: str = "wmobs") -> Any:
    """wmobs' logger (module documentation)."""
    return _Logger(name)

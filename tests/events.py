"""A logger for the tests: what wmobs logs, kept (``attach(logger=...)`` and the exporters take
any structlog-style logger). Tests read wmobs' events through it, never through the logging
configuration, which is the application's (wmobs never configures logging)."""

from __future__ import annotations

import threading
from typing import Any


class RecordingLogger:
    """A structlog-style logger (``log.info("event", key=value)``) that keeps each call as
    ``(level, event, fields)`` in ``seen``; ``logged`` is set at the first."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []
        self.logged = threading.Event()

    def __getattr__(self, level: str) -> Any:
        if level.startswith("_"):
            raise AttributeError(level)

        def log(event: str, **fields: Any) -> None:
            self.seen.append((level, event, fields))
            self.logged.set()

        return log

    def events(self) -> list[tuple[str, str]]:
        """``(level, event)`` of each call, in order."""
        return [(level, event) for level, event, _ in self.seen]

"""Durations as users write them: Spark interval strings or ``datetime.timedelta``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["Tolerances", "to_micros"]

_UNITS_US = {
    "microsecond": 1,
    "us": 1,
    "millisecond": 1_000,
    "ms": 1_000,
    "second": 1_000_000,
    "sec": 1_000_000,
    "s": 1_000_000,
    "minute": 60_000_000,
    "min": 60_000_000,
    "m": 60_000_000,
    "hour": 3_600_000_000,
    "h": 3_600_000_000,
    "day": 86_400_000_000,
    "d": 86_400_000_000,
    "week": 604_800_000_000,
}
_LONGEST_US = 10_000 * 365 * 86_400_000_000
"""The longest duration a policy takes: 10,000 years, beyond any two of Spark's timestamps
(years 1 to 9999) apart, and small enough that a timestamp plus or minus a few of them stays
within a long of microseconds (the JVM engine's arithmetic)."""
_PART = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def _unit(name: str) -> int | None:
    name = name.lower()
    if name in _UNITS_US:
        return _UNITS_US[name]
    if name.endswith("s") and name[:-1] in _UNITS_US:
        return _UNITS_US[name[:-1]]
    return None


def to_micros(value: str | timedelta, argument: str) -> int:
    """``"5 minutes"``, ``"1 hour 30 minutes"``, ``"250 ms"`` or a timedelta, in microseconds.

    Raises ``TypeError``/``ValueError`` naming ``argument`` for anything else, a negative
    duration or one longer than 10,000 years.
    """
    if isinstance(value, timedelta):
        micros = value // timedelta(microseconds=1)
    elif isinstance(value, str):
        text = value.strip()
        if text.lower().startswith("interval "):
            text = text[len("interval ") :]
        micros_f = 0.0
        pos = 0
        while pos < len(text):
            match = _PART.match(text, pos)
            unit = None if match is None else _unit(match.group(2))
            if match is None or unit is None:
                raise ValueError(
                    f"{argument}: {value!r} is not a duration like '5 seconds', '2 minutes' "
                    "or a datetime.timedelta"
                )
            micros_f += float(match.group(1)) * unit
            pos = match.end()
        if not text:
            raise ValueError(f"{argument}: empty duration")
        if micros_f > _LONGEST_US:  # before round(): a float may be infinite
            raise ValueError(f"{argument}: {value!r} is longer than 10,000 years")
        micros = round(micros_f)
    else:
        raise TypeError(
            f"{argument}: expected a duration string or datetime.timedelta, "
            f"got {type(value).__name__}"
        )
    if micros < 0:
        raise ValueError(f"{argument}: must not be negative, got {value!r}")
    if micros > _LONGEST_US:
        raise ValueError(f"{argument}: {value!r} is longer than 10,000 years")
    return micros


@dataclass(frozen=True)
class Tolerances:
    """A :class:`~wmobs.TimePolicy`'s durations, resolved to microseconds once, at
    construction. ``None``: that feature is off."""

    late_arrival_us: int
    out_of_order_us: int
    early_arrival_us: int | None = None
    substream_ttl_us: int | None = None
    idle_timeout_us: int | None = None
    idle_check_interval_us: int | None = None
    substream_skew_us: int | None = None

    @property
    def watermark_delay_us(self) -> int:
        """The delay of Spark's watermark on the policy's output: ``out_of_order``, plus
        ``substream_skew`` with substreams (downstream windows wait for the slowest key)."""
        return self.out_of_order_us + (self.substream_skew_us or 0)

    @classmethod
    def resolve(
        cls,
        *,
        late_arrival: str | timedelta,
        out_of_order: str | timedelta,
        early_arrival: str | timedelta | None,
        substream_ttl: str | timedelta | None,
        idle_timeout: str | timedelta | None,
        idle_check_interval: str | timedelta | None,
        substream_skew: str | timedelta | None = None,
    ) -> Tolerances:
        """From the values users write; errors name the argument."""

        def optional(value: str | timedelta | None, argument: str, minimum: int = 0) -> int | None:
            if value is None:
                return None
            micros = to_micros(value, argument)
            if micros < minimum:
                raise ValueError(f"{argument}: must be at least 1 millisecond, got {value!r}")
            return micros

        if idle_check_interval is not None and idle_timeout is None:
            raise ValueError("idle_check_interval: only meaningful with idle_timeout")
        return cls(
            late_arrival_us=to_micros(late_arrival, "late_arrival"),
            out_of_order_us=to_micros(out_of_order, "out_of_order"),
            early_arrival_us=optional(early_arrival, "early_arrival"),
            substream_ttl_us=optional(substream_ttl, "substream_ttl"),
            idle_timeout_us=optional(idle_timeout, "idle_timeout", 1000),
            idle_check_interval_us=optional(idle_check_interval, "idle_check_interval", 1000),
            substream_skew_us=optional(substream_skew, "substream_skew"),
        )

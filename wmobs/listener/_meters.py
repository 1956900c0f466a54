"""wmobs' instruments on an OpenTelemetry meter: created once per meter, read by every monitor
attached to it.

OpenTelemetry's SDK hands back the meter it made before for the same name and version, and on
a meter the instrument it made before under a name, with the callbacks it was made with. Made
per monitor, a monitor closed and attached again on one meter provider (the application's, or
the global one) would have its instruments read the closed monitor's tracker, and export
nothing more. So each provider's instruments are made once, and their callbacks read every
tracker attached to that provider that is not closed.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Histogram, Meter, MeterProvider, Observation

    from wmobs.listener._tracker import Tracker

__all__ = ["MeterInstruments", "instruments_on"]

_LOCK = threading.Lock()
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, MeterInstruments] = weakref.WeakKeyDictionary()


class MeterInstruments:
    """One meter's instruments: ``observables`` (each with ``name``, ``kind``, ``unit``,
    ``description`` and ``fn``, what :meth:`Tracker.observe` applies), and the synchronous
    histogram ``make_histogram`` makes."""

    def __init__(
        self,
        meter: Meter,
        observables: Sequence[Any],
        make_histogram: Callable[[Meter], Histogram],
    ) -> None:
        self._lock = threading.Lock()
        self._trackers: list[Tracker] = []
        for spec in observables:
            create = (
                meter.create_observable_gauge
                if spec.kind == "gauge"
                else meter.create_observable_counter
            )
            create(
                spec.name,
                callbacks=[self._callback(spec.fn)],
                unit=spec.unit,
                description=spec.description,
            )
        self.histogram = make_histogram(meter)

    def add(self, tracker: Tracker) -> None:
        """Read ``tracker`` too, until it is closed (closed ones let go now, as well as at a
        collection: a provider that never collects holds none of them)."""
        with self._lock:
            self._trackers = [t for t in self._trackers if not t.closed]
            self._trackers.append(tracker)

    def trackers(self) -> list[Tracker]:
        """The trackers read, in the order they came; closed ones are let go."""
        with self._lock:
            self._trackers = [t for t in self._trackers if not t.closed]
            return list(self._trackers)

    def _callback(self, fn: Any) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> list[Observation]:
            out: list[Observation] = []
            for tracker in self.trackers():
                out.extend(tracker.observe(fn))
            return out

        return callback


def instruments_on(
    provider: MeterProvider, make: Callable[[Meter], MeterInstruments], *, version: str
) -> MeterInstruments:
    """``provider``'s instruments (its meter ``wmobs``), made by ``make`` the first time (a
    provider that cannot be remembered, not weakly referable, gets new ones each time). By
    provider, not by meter: OpenTelemetry's global provider before the application sets one
    hands out a new proxy meter at each call, and keeps every one for the life of the process;
    instruments made on each, with a tracker each, would hold every monitor ever attached, and
    only the first one's would be read once a provider is set."""
    with _LOCK:
        provider = _as_set(provider)
        try:
            made = _BY_PROVIDER.get(provider)
        except TypeError:
            return make(provider.get_meter("wmobs", version))
        if made is None:
            made = _BY_PROVIDER[provider] = make(provider.get_meter("wmobs", version))
        return made


def _as_set(provider: MeterProvider) -> MeterProvider:
    """The provider whose instruments ``provider``'s are (call with ``_LOCK`` held): the global
    one the application set, for OpenTelemetry's proxy once it has one, and for that one the
    instruments made on the proxy before (the SDK keeps the first instruments made under a
    name, with their callbacks: new ones there would never be read)."""
    from opentelemetry.metrics import _internal

    proxy = getattr(_internal, "_PROXY_METER_PROVIDER", None)
    real = getattr(proxy, "_real_meter_provider", None)
    if proxy is None or real is None:
        return provider
    if provider is proxy:
        provider = real
    if provider is real and proxy in _BY_PROVIDER and real not in _BY_PROVIDER:
        _BY_PROVIDER[real] = _BY_PROVIDER[proxy]
    return provider

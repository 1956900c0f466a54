"""wmobs' metrics: the instruments, their contract and the tracker behind them.

The documentation of every metric (name, type, labels, unit) is that of the module that
declares them, :mod:`wmobs.listener.metrics`; this module re-exports it so that
``from wmobs.metrics import CONTRACT, Instruments, Tracker`` keeps working: this module was in
the released 0.1.0 and 0.2.0.
"""

from __future__ import annotations

from wmobs.listener.metrics import BATCH_DURATION_BUCKETS, CONTRACT, Instruments, Tracker

__all__ = ["BATCH_DURATION_BUCKETS", "CONTRACT", "Instruments", "Tracker"]

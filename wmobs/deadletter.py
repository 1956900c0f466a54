"""Dead letters: where a time policy's dropped rows go (see :mod:`wmobs.policy.deadletter`).

Re-exported here so that ``from wmobs.deadletter import DeadLetter`` keeps working: this module
was in the released 0.1.0 and 0.2.0.
"""

from __future__ import annotations

from wmobs.policy.deadletter import (
    BATCH_COLUMN,
    POLICY_COLUMN,
    RULE_COLUMN,
    DeadLetter,
    DeadLetterFunction,
)

__all__ = ["BATCH_COLUMN", "POLICY_COLUMN", "RULE_COLUMN", "DeadLetter", "DeadLetterFunction"]

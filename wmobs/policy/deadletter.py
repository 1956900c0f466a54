"""Dead letters: every row a time policy drops, kept somewhere instead of vanishing.

``TimePolicy.apply(df, dead_letter=...)`` adds one stage to the query: every dropped row, with
every input column plus ``wmobs_rule`` (the rule that dropped it: ``invalid_time``,
``early_arrival``, ``late_arrival`` or ``out_of_order``), ``wmobs_policy`` (the time policy's
name, its ``policy`` label) and ``wmobs_batch_id`` (the micro-batch), goes to the destination;
kept rows continue to the query's sink. Destinations:

- a directory (a local path or any URI of :mod:`wmobs.policy._storage`: ``s3a://``,
  ``abfss://``, ``gs://``, ``dbfs:/``, ...), as Parquet (default) or JSON lines:
  ``<dir>/batch_id=<N>/part-<partition>-<policy>-<query id>.parquet``;
- a function ``fn(table: pyarrow.Table, batch_id: int, partition_id: int) -> None``, called in
  the executor once per task that dropped rows (it must be picklable and idempotent).

Exactly once, as far as the destination is concerned: a file is named by batch, partition,
policy and query id, and written whole at once (one PUT of the final object on an object store,
which has no atomic rename; a rename on a local path), so a retried task or a batch re-run after
a restart from the checkpoint writes the same file again, while another policy or query, or the
same one started afresh on a new checkpoint, writes files of its own beside it. The stage runs
in the same tasks as the policy's ``observe``: the rows counted as
``wmobs_dead_letter_rows_total`` are exactly the rows handed to the destination (a task that
fails to write fails, and its counts are discarded with it).

The plan, decided once when the policy is applied
(:func:`wmobs.policy._deadletter_plan.choose_plan`), logged with the engine (``wmobs.engine``)
and exported as the ``dead_letters`` label of ``wmobs_policy_info``;
cheapest first (the benchmarks page has each):

- ``jvm``: on the JVM engine, a Parquet directory reached with the default :class:`Storage`
  (credentials from the environment, as Spark's): nothing crosses into Python. A JVM
  function, called only for dropped rows, writes each task's file with Spark's own Parquet
  writer, the session's Parquet settings and its Hadoop configuration
  (:func:`dead_letter_writer`): every type Spark writes to Parquet, nested ones included.
- ``python_dropped``: elsewhere, kept rows stay in the JVM; each dropped row crosses into
  Python as one JSON string of exact text forms of its columns, each kept row as one null
  (:func:`dead_letter_filter`).
- ``python_all``: columns without such a form (nested, maps, intervals, ``TIMESTAMP_NTZ``),
  and PySpark before 4.1, take the plan where every row crosses (:func:`dead_letter_stage`,
  ``mapInArrow``).

Without ``dead_letter`` no Python runs per row and dropped rows are only counted.

This module is the public face of dead letters: the destination is ``_deadletter``'s, the plans
written by Python (on either engine) ``_deadletter_handover``'s, and the JVM engine's writer
``_jvm._deadletters``'.
"""

from __future__ import annotations

from wmobs.policy._deadletter import (
    BATCH_COLUMN,
    POLICY_COLUMN,
    RULE_COLUMN,
    DeadLetter,
    DeadLetterFunction,
)
from wmobs.policy._deadletter_handover import dead_letter_filter, dead_letter_stage
from wmobs.policy._jvm._deadletters import dead_letter_writer

__all__ = [
    "BATCH_COLUMN",
    "POLICY_COLUMN",
    "RULE_COLUMN",
    "DeadLetter",
    "DeadLetterFunction",
    "dead_letter_filter",
    "dead_letter_stage",
    "dead_letter_writer",
]

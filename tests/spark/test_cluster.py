"""The policies where executors are separate processes (``local-cluster[2,1,1024]``), and one of
them dies mid-stream; in a child process (see ``cluster_job.py``)."""

from __future__ import annotations

import pyspark
import pytest

from ._streaming import run_job

pytestmark = pytest.mark.spark


def test_policies_on_separate_executors_and_an_executor_killed_mid_stream() -> None:
    """``local-cluster[2,1,1024]``: two executor JVMs, each with its own Python workers."""
    result = run_job("tests.spark.cluster_job")

    assert result["master"] == "local-cluster[2,1,1024]"
    assert result["executors"] == 2  # two executor JVMs, each with its own Python workers
    # The worked example, exactly: globally (one event per micro-batch) and with substreams.
    assert result["global_exact"] is True
    assert result["global_counts"] == {
        "early_arrival:dropped": 1,
        "late_arrival:adjusted": 1,
        "out_of_order:adjusted": 2,
    }
    assert result["substreams_exact"] is True
    # The Python engine too, where Spark has it (not 3.5); both found their named query's
    # checkpoint below a relative session root.
    python_engine = int(pyspark.__version__.split(".")[0]) >= 4
    assert result.get("python_global_exact") is (True if python_engine else None)
    # The idle timeout closes a quiet window, globally and per key, with exactly its rows.
    for idle in (result["idle"], result["idle_substreams"]):
        assert idle["windows"] == [[idle["window_start"], 3]]
        assert idle["after_end_plus_timeout"] is True
        assert idle["firings"] >= 1
    # Relative checkpoint and dead-letter paths and session roots, as Spark resolves the query's
    # own: against the driver's working directory (executors' tasks looked in theirs before).
    assert result["relative_paths_under_the_drivers_directory"] is True
    # One executor killed (SIGKILL) mid-stream, Spark's checkpoint on s3a://, a global policy
    # and one per device (its keys in Spark's state store) over the same 320 rows: the query
    # goes on, nothing lost or doubled, every counter exact.
    assert result["s3a"] is True, "Hadoop's S3A connector is missing (./dev test fetches it)"
    kill = result["kill"]
    assert kill["checkpoint_objects"] >= 8  # the offsets log, in the bucket
    assert len(kill["killed"]) == 1 and kill["executors_before"] == 2
    assert kill["rows_in"] == kill["input_rows_counter"] == 2 * 320
    assert kill["kept"] + kill["dead"] == kill["rows_in"]
    assert kill["kept_unique"] == kill["kept"] and kill["dead_unique"] == kill["dead"]
    assert kill["overlap"] == 0
    assert len(kill["state_operators"]) == 1  # the keys' operator (the sink keeps no state)
    assert kill["by_policy"] == {
        name: {"dead": 96, "dead_letter_counter": 96, "dropped_counters": 96}
        for name in ("kill", "kill_keys")
    }

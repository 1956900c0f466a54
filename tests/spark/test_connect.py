"""wmobs over Spark Connect, in child processes (see ``connect_job.py``): a server without
wmobs' extension (the listener; the policies on the Python engine) and one with it (the
worked example on the JVM engine, called by name from the client)."""

from __future__ import annotations

import pytest

from wmobs.testing import parse_metrics

from ._streaming import run_job

pytestmark = pytest.mark.spark


def test_attach_over_spark_connect() -> None:
    pytest.importorskip("pyspark.sql.connect")
    result = run_job("tests.spark.connect_job", timeout=600)

    assert result["session"].startswith("pyspark.sql.connect")
    assert result["input_rows"] == result["rows_written"] == 6
    assert result["watermark"] == pytest.approx(result["expected_watermark"], abs=0.01)
    assert result["active_after_stop"] is False
    assert result["errors"] == 0
    # A global TimePolicy over Connect: one row late (adjusted), one early (dead-lettered).
    assert result["policy_kept"] == 2
    assert result["policy_events"]["late_arrival:adjusted"] == 1
    assert result["policy_events"]["early_arrival:dropped"] == 1
    assert result["policy_dead_letters"] == 1
    assert result["policy_engine"] == result["substreams_engine"] == "python"
    assert "engine='jvm' is not to be had" in result["jvm_error"]
    assert "spark.sql.extensions=io.wmobs.spark.WmobsExtensions" in result["jvm_error"]
    # Substreams over Connect, their state carried from one micro-batch to the next.
    assert result["substreams_kept"] == 4
    assert result["substreams_adjusted_rows"] == 1
    assert result["substreams_events"]["out_of_order:adjusted"] == 1
    samples = parse_metrics(result["scraped"])
    key = (("query", "wm_connect"),)
    assert samples[("wmobs_input_rows_total", key)] == 6
    assert samples[("wmobs_watermark_delay_seconds", key)] == pytest.approx(
        result["delay"], abs=2.0
    )


def test_the_jvm_engine_over_spark_connect() -> None:
    """A Connect server started with wmobs' extension (``wmobs.configure_spark``): the client
    calls its functions by name, and the worked example comes out exact, globally (one event
    per micro-batch, from the Python API and from SQL) and per device; the idle timeout
    closes a quiet device's window and an early row is written as a dead letter. The global
    policy and the idle timeout write through ``foreachBatch`` functions, whose actions the
    server runs on threads of its own: the micro-batch's watermark, time and id reach their
    tasks in the plan."""
    pytest.importorskip("pyspark.sql.connect")
    result = run_job("tests.spark.connect_job --extension", timeout=600)

    assert result["session"].startswith("pyspark.sql.connect")
    for how in ("global", "substreams", "sql"):
        assert result[how]["engine"] == "jvm", how
        assert result[how]["exact"], (how, result[how]["kept"])
    assert result["global"]["events"] == {
        "early_arrival:dropped": 1,
        "late_arrival:adjusted": 1,
        "out_of_order:adjusted": 2,
    }
    assert result["sql"]["events"] == result["global"]["events"]  # from SQL, the same
    assert result["substreams"]["events"] == {
        "early_arrival:dropped": 1,
        "late_arrival:adjusted": 1,
    }
    # The idle timeout's heartbeat is a source of the extension, reached by name: the quiet
    # window is emitted with its one real row, and the early row is in the dead letters.
    assert result["idle"] == {
        "emitted": [1],
        "dead_letter_files_rows": 1,
        "dead_letter_batches": [0],  # its micro-batch's id, not -1 (none known)
    }
    # Dead letters the server cannot write: an error naming them at apply, as in a classic
    # session (the server checks them as it analyses the plan).
    assert result["unwritable"].startswith("StorageError: dead_letter: "), result["unwritable"]
    assert "/proc/wmobs-dead" in result["unwritable"]

"""Time policies from SQL: ``wmobs_time_policy(TABLE(events), event_time => ..., ...)``, the
extension's table-valued function, against the worked example's reference cases, with the
Python API's metrics, dead letters and errors."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wmobs
from wmobs import TimePolicy
from wmobs.testing import iso

from ._streaming import firings, start_kept, wait_until, write_rows
from .test_idle_spark import heartbeat_sources
from .test_policy_spark import (
    GLOBAL_EXPECTED,
    SCHEMA,
    SUBSTREAM_EXPECTED,
    epoch,
    expected_seconds,
    input_times,
    observed_histograms,
    worked_histograms,
    worked_rows,
)

pytestmark = pytest.mark.spark


def _events(spark: Any, source: Path, view: str) -> None:
    """A streaming temp view over ``source``, one file per micro-batch."""
    from wmobs.policy._jvm._extension import load

    load(spark)  # a session started without the extension: the function registered now
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    stream.createOrReplaceTempView(view)


def _run(spark: Any, sql: str, name: str, checkpoint: Path) -> tuple[dict[int, int | None], Any]:
    """The query of ``sql`` run to the end of its input: (id -> system seconds, snapshot of the
    policy named ``name``, progress)."""
    reader = InMemoryMetricReader()
    with wmobs.attach(spark, meter_provider=MeterProvider(metric_readers=[reader])) as monitor:
        query = start_kept(spark.sql(sql), name, str(checkpoint))
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        wait_until(lambda: (s := monitor.snapshot(name)) is not None and not s.active)
        snap = monitor.snapshot(name)
        kept = {r.id: r.system for r in spark.sql(f"select * from {name}").collect()}
    assert snap is not None
    return kept, snap, query.recentProgress


def test_the_worked_example_from_sql_global_and_per_key(spark: Any, tmp_path: Path) -> None:
    """The worked example, one event per micro-batch through the global policy (with dead
    letters) and all at once per device: the reference cases' verdicts, the same counts,
    distributions and input times as ``TimePolicy.apply``, the observation under the policy's
    name, the dead letters in Parquet. No ``checkpoint_location``: the queries have their own
    ``checkpointLocation``, not below the session's root, which the extension finds."""
    for row in worked_rows():
        write_rows(tmp_path / "in", f"event-{row['id']:02d}", [row])
    _events(spark, tmp_path / "in", "worked_events")
    checkpoint = tmp_path / "ckpt-global"
    kept, snap, progress = _run(
        spark,
        f"""SELECT * FROM wmobs_time_policy(
              TABLE(worked_events),
              event_time => 'EventTime', arrival_time => 'ArrivalTime',
              early_arrival => '5 minutes', late_arrival => '5 minutes',
              out_of_order => '2 minutes', name => 'sql_global',
              dead_letter => '{tmp_path / "dead"}')""",
        "sql_global_out",
        checkpoint,
    )
    same = TimePolicy(name="sql_global", late_arrival="5 minutes", out_of_order="2 minutes")
    assert kept == expected_seconds(GLOBAL_EXPECTED)
    policy = snap.policy("sql_global")
    assert policy.engine == "jvm" and policy.dead_letter_plan == "jvm"
    assert policy.events[("early_arrival", "dropped")] == 1
    assert policy.events[("out_of_order", "adjusted")] == 2
    assert policy.events[("late_arrival", "adjusted")] == 1
    assert policy.dead_letter_rows == 1
    dead = spark.read.parquet(str(tmp_path / "dead")).collect()
    assert [(r.id, r.wmobs_rule, r.wmobs_policy) for r in dead] == [
        (3, "early_arrival", "sql_global")
    ]
    assert input_times(progress, same) == (epoch("12:21") * 10**6, epoch("12:23") * 10**6)
    assert observed_histograms(progress, same) == worked_histograms(per_key=False)

    # Per device, as Azure Stream Analytics writes it: the tolerances from the session's
    # settings, the event time and keys from TIMESTAMP BY ... OVER, the policy named after its
    # input. The shared session did not start with the extension, so the parser that reads the
    # clause wraps Spark's here, as the extension's does in a session started with it.
    write_rows(tmp_path / "all", "all", worked_rows())
    _events(spark, tmp_path / "all", "worked_all")
    asa = "SELECT * FROM worked_all TIMESTAMP BY EventTime OVER deviceId"
    parser = _timestamp_by(spark)
    assert "wmobs_time_policy" in parser.parsePlan(asa).toString()
    rewritten = spark._jvm.io.wmobs.spark.TimestampBy.rewrite(asa)
    settings = {"late_arrival": "5 minutes", "out_of_order": "2 minutes"}
    for key, value in settings.items():
        spark.conf.set(f"spark.wmobs.sql.{key}", value)
    try:
        # Through a view, which Spark analyses under the settings of its own it captured, not
        # the session's: the policy still takes the session's spark.wmobs.sql.* settings.
        spark.sql(f"CREATE OR REPLACE TEMP VIEW worked_judged AS {rewritten}")
        kept, snap, progress = _run(
            spark, "SELECT * FROM worked_judged", "sql_keys_out", tmp_path / "ckpt-keys"
        )
    finally:
        for key in settings:
            spark.conf.unset(f"spark.wmobs.sql.{key}")
    same = TimePolicy(name="worked_all", substream_by=["deviceId"])
    assert kept == expected_seconds(SUBSTREAM_EXPECTED)
    assert snap.policy("worked_all").dead_letter_plan == "none"
    assert observed_histograms(progress, same) == worked_histograms(per_key=True)
    states = [op["operatorName"] for p in progress for op in p["stateOperators"]]
    assert "flatMapGroupsWithState" in states  # per key in Spark's state store


def _timestamp_by(spark: Any) -> Any:
    """The session's SQL parser as the extension wraps it: TIMESTAMP BY read too."""
    jspark = spark._jsparkSession
    return spark._jvm.io.wmobs.spark.TimestampBy.parser(jspark, jspark.sessionState().sqlParser())


def test_the_timestamp_by_parser_reads_spark_sql_as_spark_does(spark: Any, tmp_path: Path) -> None:
    """Spark's own statements go through untouched; one Spark refuses stays refused, with
    Spark's error, unless it has the clause; a setting that is no option is an error."""
    from wmobs.policy._jvm._extension import load

    load(spark)
    parser = _timestamp_by(spark)
    spark_parser = spark._jsparkSession.sessionState().sqlParser()

    def plan(parser: Any, sql: str) -> str:  # without the expressions' ids
        return re.sub(r"#\d+", "", parser.parsePlan(sql).toString())

    sql = "SELECT id, 'TIMESTAMP BY' AS t FROM range(3) WHERE id > 1"
    assert plan(parser, sql) == plan(spark_parser, sql)
    expression = parser.parseExpression("a + 1").toString()
    assert expression == spark_parser.parseExpression("a + 1").toString()
    with pytest.raises(Exception, match="PARSE_SYNTAX_ERROR"):
        parser.parsePlan("SELEC 1")
    with pytest.raises(Exception, match="TIMESTAMP BY names no event time"):
        parser.parsePlan("SELECT * FROM events TIMESTAMP BY")
    _events(spark, tmp_path, "set_events")
    spark.conf.set("spark.wmobs.sql.late_arival", "5 minutes")
    try:
        unknown = r"spark\.wmobs\.sql\.late_arival: no option late_arival"
        with pytest.raises(Exception, match=unknown):
            spark.sql("SELECT * FROM wmobs_time_policy(TABLE(set_events))").collect()
    finally:
        spark.conf.unset("spark.wmobs.sql.late_arival")
    # A setting for the policies with an idle timeout is left by those without one; an error
    # of a column that a setting names names the setting.
    spark.conf.set("spark.wmobs.sql.idle_check_interval", "10 seconds")
    spark.conf.set("spark.wmobs.sql.substream_by", "device")
    try:
        call = "SELECT * FROM wmobs_time_policy(TABLE(set_events){})"
        assert "system_timestamp" in spark.sql(call.format(", substream_by => NULL")).columns
        missing = r"spark\.wmobs\.sql\.substream_by: column 'device' is not in the input"
        with pytest.raises(Exception, match=missing):
            spark.sql(call.format("")).collect()
    finally:
        spark.conf.unset("spark.wmobs.sql.idle_check_interval")
        spark.conf.unset("spark.wmobs.sql.substream_by")
    judged = spark.sql(
        "SELECT * FROM wmobs_time_policy(TABLE(set_events), distributions => 'false')"
    )
    assert "system_timestamp" in judged.columns


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ("evnt_time => 'EventTime'", r"no option evnt_time; the options are event_time, "),
        ("evnt_time => current_timestamp()", r"no option evnt_time; the options are event_"),
        ("substream_by => array('id', NULL)", r"substream_by: a NULL in array\("),
        ("distributions => 'maybe'", r"distributions: expected true or false, got maybe"),
        ("event_time => 'when'", r"event_time: column 'when' is not in the input \(columns: id,"),
        ("arrival_time => 'id'", r"arrival_time: column 'id' is int, expected timestamp; epoch"),
        ("late_arrival => '5 parsecs'", r"late_arrival: '5 parsecs' is not a duration"),
        ("out_of_order => '-1 second'", r"out_of_order: must not be negative"),
        ("late_arrival_action => 'keep'", r"late_arrival_action: must be 'adjust' or 'drop'"),
        ("substream_by => 'device'", r"substream_by: column 'device' is not in the input"),
        ("name => '..'", r"name: use letters, digits"),
        ("name => 'a', name => 'b'", r"option name given twice"),
        ("'EventTime'", r"takes its options by name \(event_time => 'EventTime'\), not 'Ev"),
        ("substream_by => 'tags'", r"substream_by: column 'tags' is map<string,string>; a key"),
        (
            "dead_letter => '/proc/wmobs'",
            r"cannot write to the dead letters' directory /proc/wmobs \(java",
        ),
    ],
)
def test_sql_errors_name_the_argument(spark: Any, tmp_path: Path, options: str, error: str) -> None:
    _events(spark, tmp_path, "erring_source")
    spark.sql("SELECT *, map('a', 'b') AS tags FROM erring_source").createOrReplaceTempView(
        "erring_events"
    )
    with pytest.raises(Exception, match=error):
        spark.sql(f"SELECT * FROM wmobs_time_policy(TABLE(erring_events), {options})").collect()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("wmobs_time_policy('events', name => 'a')", r"its first argument is the input, TABLE\("),
        ("wmobs_time_policy(TABLE(batch_events))", r"the input is not streaming; pass TABLE\("),
    ],
)
def test_sql_errors_name_the_input(spark: Any, call: str, error: str) -> None:
    from wmobs.policy._jvm._extension import load

    load(spark)
    spark.range(3).createOrReplaceTempView("batch_events")
    with pytest.raises(Exception, match=error):
        spark.sql(f"SELECT * FROM {call}").collect()


@pytest.mark.parametrize(
    "keys", ["", ", substream_by => 'deviceId', substream_ttl => '1 hour'"], ids=["global", "keys"]
)
def test_an_idle_timeout_from_sql_closes_a_quiet_window(
    spark: Any, tmp_path: Path, keys: str
) -> None:
    """SQL's idle timeout, whose heartbeat the extension plans itself (not the Python API's
    plan): one event, then silence. Its 3-second window, grouped in SQL after the policy, is
    emitted with exactly its row once the input is quiet for a second, the firing counted; the
    heartbeat is a source of the query; per device too (with ``substream_ttl``)."""
    from wmobs.policy._jvm._extension import load

    load(spark)
    now = time.time()
    write_rows(tmp_path / "in", "0", [{"EventTime": iso(now - 60), "deviceId": "A", "v": 7}])
    stream = spark.readStream.schema("EventTime TIMESTAMP, deviceId STRING, v LONG")
    stream.json(str(tmp_path / "in")).createOrReplaceTempView("quiet_events")
    windows = spark.sql(
        f"""SELECT window.start AS s, deviceId, count(*) AS n, sum(v) AS total
            FROM wmobs_time_policy(TABLE(quiet_events), event_time => 'EventTime',
                 late_arrival => '10 minutes', idle_timeout => '1 second',
                 name => 'sql_idle'{keys})
            GROUP BY window(system_timestamp, '3 seconds'), deviceId"""
    )
    with wmobs.attach(spark, prometheus_port=None) as monitor:
        query = (
            windows.writeStream.queryName("sql_idle_q")
            .format("memory")
            .outputMode("append")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_until(
                lambda: spark.sql("SELECT * FROM sql_idle_q").count() > 0,
                timeout=90,
                what="the quiet window",
            )
            wait_until(lambda: firings(monitor, "sql_idle_q") >= 1, what="the firing")
            rows = spark.sql("SELECT deviceId, n, total FROM sql_idle_q").collect()
            sources = heartbeat_sources(query)
        finally:
            query.stop()
    assert [(r.deviceId, r.n, r.total) for r in rows] == [("A", 1, 7)]
    assert any("IdleHeartbeat" in s for s in sources), sources  # the extension's heartbeat

"""The listener's event handling and error containment, with events built by ``fromJson``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from tests.events import RecordingLogger
from wmobs.testing import MetricsRecorder, parse_metrics, progress_json, state_operator

listener_mod = pytest.importorskip("pyspark.sql.streaming.listener")
from wmobs.listener._spark_listener import WmobsListener, progress_dict  # noqa: E402

NOW = 1_800_000_000.0


@pytest.fixture
def rec() -> Iterator[MetricsRecorder]:
    recorder = MetricsRecorder(clock=lambda: NOW)
    yield recorder
    recorder.shutdown()


def _progress_event(**kw: Any) -> Any:
    body = json.loads(json.dumps(progress_json(**kw)))
    return listener_mod.QueryProgressEvent.fromJson({"progress": body})


def _terminated_event(query_id: str, exception: str | None, error_class: str | None = None) -> Any:
    return listener_mod.QueryTerminatedEvent.fromJson(
        {
            "id": query_id,
            "runId": "00000000-0000-4000-8000-000000000002",
            "exception": exception,
            "errorClassOnException": error_class,
        }
    )


def test_progress_dict_reuses_parsed_json() -> None:
    event = _progress_event()
    assert progress_dict(event.progress) is event.progress._jdict
    assert progress_dict(json.dumps({"id": "x"})) == {"id": "x"}


def test_events_update_metrics_and_log(rec: MetricsRecorder) -> None:
    listener = WmobsListener(rec.tracker, [rec.instruments], logger=structlog.get_logger())
    event = _progress_event(
        watermark=NOW - 12, state_operators=[state_operator(dropped_by_watermark=2)]
    )
    with capture_logs() as logs:
        listener.onQueryProgress(event)
        listener.onQueryTerminated(_terminated_event(str(event.progress.id), "boom\n at x"))
    assert listener.errors == 0
    assert rec.value("wmobs_batch_duration_seconds_count", query="q") == 1
    assert rec.value("wmobs_query_terminations_total", query="q", outcome="failed") == 1
    by_event = {entry["event"]: entry for entry in logs}
    assert by_event["wmobs.progress"]["delay_s"] == 12.0
    assert by_event["wmobs.progress"]["log_level"] == "debug"
    assert by_event["wmobs.rows_dropped_by_watermark"]["rows"] == 2
    assert by_event["wmobs.query_failed"]["exception"] == "boom"
    assert by_event["wmobs.query_failed"]["log_level"] == "error"


@pytest.mark.parametrize(
    ("error_class", "says"),
    [
        ("STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED", "real-time mode runs policies"),
        ("STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "engine= and spark.sql"),
        ("STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY", "engine= and spark.sql"),
        ("SOMETHING_ELSE", None),
    ],
)
def test_a_failed_query_is_told_what_to_do_where_wmobs_knows(
    rec: MetricsRecorder, error_class: str, says: str | None
) -> None:
    """Spark's error classes that a wmobs policy can cause get a hint in the failure's log: real
    time mode, and substreams whose operator changed with the state store provider (Spark 4:
    ``transformWithState`` on RocksDB)."""
    listener = WmobsListener(rec.tracker, [rec.instruments], logger=structlog.get_logger())
    with capture_logs() as logs:
        listener.onQueryTerminated(
            _terminated_event("00000000-0000-4000-8000-000000000001", "failed\n at x", error_class)
        )
    (failed,) = [entry for entry in logs if entry["event"] == "wmobs.query_failed"]
    assert failed["error_class"] == error_class
    assert (says in failed["hint"]) if says else ("hint" not in failed)


def test_a_million_keys_on_the_heap_are_told_once_per_query(rec: MetricsRecorder) -> None:
    """A per-key operator (substreams' flatMapGroupsWithState) holding a million keys in Spark's
    default store (it reports ``loadedMapCacheHitCount``): one warning per query with the keys,
    the memory and the advice; RocksDB's, a window aggregation's or fewer keys: nothing."""
    hdfs = {"loadedMapCacheHitCount": 3, "loadedMapCacheMissCount": 0}
    rocksdb = {"rocksdbGetCount": 10, "rocksdbPutCount": 10}

    def keyed(rows: int, custom: dict[str, int], name: str = "flatMapGroupsWithState") -> Any:
        return state_operator(name, rows_total=rows, memory_bytes=rows * 250, custom_metrics=custom)

    log = RecordingLogger()
    listener = WmobsListener(rec.tracker, [rec.instruments], logger=log)
    for query, operators in [
        ("small", [keyed(999_999, hdfs)]),
        ("rocks", [keyed(5_000_000, rocksdb)]),
        ("window", [keyed(2_000_000, hdfs, "stateStoreSave")]),
        ("fleet", [keyed(2_000_000, hdfs, "stateStoreSave"), keyed(1_200_000, hdfs)]),
        ("fleet", [keyed(1_300_000, hdfs)]),  # the same query again: already told
        ("pandas", [keyed(1_100_000, hdfs, "applyInPandasWithState")]),
        # transformWithState takes RocksDB today; were it to run on the default store:
        ("tws", [keyed(1_500_000, hdfs, "transformWithStateExec")]),
    ]:
        listener.onQueryProgress(_progress_event(name=query, state_operators=operators))
    assert listener.errors == 0
    told = [(level, fields) for level, event, fields in log.seen if event == "wmobs.state_on_heap"]
    assert [(level, f["query"], f["keys"], f["memory_mib"]) for level, f in told] == [
        ("warning", "fleet", 1_200_000, 286),
        ("warning", "pandas", 1_100_000, 262),
        ("warning", "tws", 1_500_000, 358),
    ]
    assert all("RocksDBStateStoreProvider" in f["hint"] for _, f in told)


def test_internal_errors_are_logged_and_swallowed(rec: MetricsRecorder) -> None:
    def broken_hook(*_: Any) -> None:
        raise RuntimeError("hook bug")

    listener = WmobsListener(rec.tracker, [rec.instruments], on_progress=broken_hook)
    with capture_logs() as logs:
        listener.onQueryProgress(_progress_event())  # hook raises
        listener.onQueryProgress(object())  # type: ignore[arg-type]  # not an event at all
        listener.onQueryTerminated(None)  # type: ignore[arg-type]
        listener.onQueryIdle(None)  # type: ignore[arg-type]
        listener.onQueryStarted(None)  # type: ignore[arg-type]
    assert listener.errors == 5
    assert [e["event"] for e in logs].count("wmobs.listener_error") == 5
    # the update that preceded the hook's failure still counted
    assert rec.value("wmobs_input_rows_total", query="q") == 10


def test_the_classic_bridge_swallows_an_event_it_cannot_read(rec: MetricsRecorder) -> None:
    """PySpark's bridge reads each event from its Java object before wmobs' listener sees it;
    where that fails (a JVM shutting down), the failure is logged and swallowed as well."""
    from wmobs.listener._spark_listener import _FastJListener

    class Gone:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("the JVM is gone")

    listener = WmobsListener(rec.tracker, [rec.instruments])
    bridge = _FastJListener(listener)
    with capture_logs() as logs:
        for callback in (
            bridge.onQueryStarted,
            bridge.onQueryProgress,
            bridge.onQueryIdle,
            bridge.onQueryTerminated,
        ):
            callback(Gone())
    assert listener.errors == 4
    assert [e["callback"] for e in logs] == [
        "onQueryStarted",
        "progress",
        "onQueryIdle",
        "onQueryTerminated",
    ]


def test_only_a_path_without_a_scheme_is_qualified_and_only_by_a_classic_driver() -> None:
    """A URI and "" (a named query's checkpoint) are left alone without asking any JVM (here:
    no session at all); a Connect client's relative path too, for its server to qualify. A
    classic session's relative path is qualified by Hadoop on the driver (the cluster test),
    and an absolute one where the default filesystem is not the local one (the policy's
    Spark tests)."""
    from types import SimpleNamespace

    from wmobs._spark import qualified_path, working_directory

    nothing = SimpleNamespace()  # any call into a JVM would fail
    for path in ("", "s3a://bucket/ckpt", "file:/data/ckpt", "abfss://c@a/x"):
        assert qualified_path(nothing, path) == path

    class ConnectSession:  # a Spark Connect session's module
        pass

    ConnectSession.__module__ = "pyspark.sql.connect.session"
    assert qualified_path(ConnectSession(), "ckpt") == "ckpt"
    assert working_directory(ConnectSession()) == ""  # its server's is not the client's


def test_the_jvm_counts_as_exited_only_when_this_process_started_it_and_it_ended() -> None:
    """``Monitor.close`` and the demo skip calls into a JVM that has exited (a SIGTERM to the
    whole process group stops it too): py4j would log each failed call with a traceback."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from wmobs._spark import jvm_exited

    def session(proc: Any) -> Any:
        return SimpleNamespace(_sc=SimpleNamespace(_gateway=SimpleNamespace(proc=proc)))

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    running = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert jvm_exited(session(ended))
        assert not jvm_exited(session(running))
        assert not jvm_exited(session(None))  # a JVM that started Python (spark-submit)
        assert not jvm_exited(SimpleNamespace())  # no SparkContext here (Connect)
    finally:
        running.communicate(b"")


def test_a_skipped_micro_batch_on_the_python_engine_is_recalled_or_said_not_counted(
    rec: MetricsRecorder,
) -> None:
    """The first micro-batch of a run whose sources moved but whose plan read no row: the
    sink skipped it, having committed it before a crash. A Python-engine policy's counts of it
    are not in the event: the listener recalls, off its callback, what the policy kept of that
    micro-batch (:mod:`wmobs._kept`) into the counters, or says with one warning that it kept
    none. The JVM engine's event carries its own (kept beside the checkpoint), and a later
    micro-batch of the run is not suspect."""
    from wmobs._kept import register_recall
    from wmobs.observations import rule_column

    late = rule_column("late_arrival", "adjusted")
    listener = WmobsListener(rec.tracker, [rec.instruments], logger=structlog.get_logger())
    asked = []

    def kept(query_id: str, name: str | None, batch: int) -> dict[str, Any] | None:
        asked.append((query_id, name, batch))
        return {late: 7, "dead_letter_rows": 2} if batch == 5 else None

    register_recall("py_kept", "here", kept)

    def moved(batch: int, run: str, engines: dict[str, str], rows: int = 0) -> dict[str, Any]:
        observed = {
            f"wmobs.policy.{name}": {"engine": engine, late: 0} for name, engine in engines.items()
        }
        if engines.get("jvm_kept"):
            observed["wmobs.policy.jvm_kept"][late] = 3
        progress = progress_json(batch_id=batch, run_id=run, rows=rows, observed=observed)
        source = progress["sources"][0]
        source["startOffset"], source["endOffset"] = {"logOffset": batch - 1}, {"logOffset": batch}
        return progress

    engines = {"py": "python", "py_kept": "python", "jvm_kept": "jvm"}
    with capture_logs() as logs:
        listener._progress(moved(5, "run-2", engines))  # the re-run the sink skipped
        assert listener.join_recalls(30)
        listener._progress(moved(6, "run-2", engines))  # later: an empty file, not suspect
        listener._progress(moved(7, "run-2", engines, rows=4))
        # A run whose first micro-batch was counted already (its progress came before Spark's
        # commit): nothing of it is unreported.
        listener._progress(moved(5, "run-3", engines))
        assert listener.join_recalls(30)
    warnings = [e for e in logs if e["event"] == "wmobs.counts_not_reported"]
    assert [(w["batch"], w["policy"], w["log_level"]) for w in warnings] == [(5, "py", "warning")]
    recalled = [e for e in logs if e["event"] == "wmobs.counts_recalled"]
    assert [(r["batch"], r["policy"]) for r in recalled] == [(5, "py_kept")]
    snap = rec.tracker.snapshots()[0]
    assert asked == [(snap.query_id, snap.name, 5)]
    assert snap.policies["py_kept"].events[("late_arrival", "adjusted")] == 7
    assert snap.policies["py_kept"].dead_letter_rows == 2
    assert snap.policies["jvm_kept"].events[("late_arrival", "adjusted")] == 3 * 3
    assert listener.errors == 0


@pytest.mark.parametrize(("ran", "suspect"), [(True, False), (False, True)])
def test_a_query_found_running_at_attach_is_past_its_runs_first_micro_batch_if_it_ran_one(
    rec: MetricsRecorder, ran: bool, suspect: bool
) -> None:
    """Attached to a query whose run has finished micro-batches, the next one heard is not
    the first of its run, however few rows it read; attached before the first finished, the
    first is still the one that may be a micro-batch run again."""
    from wmobs.observations import rule_column

    listener = WmobsListener(rec.tracker, [rec.instruments], logger=structlog.get_logger())
    rec.tracker.on_seen("q-id", "run-1", "q", ran=ran)
    observed = {"wmobs.policy.py": {"engine": "python", rule_column("late_arrival", "adjusted"): 0}}
    progress = progress_json(batch_id=9, run_id="run-1", rows=0, observed=observed)
    progress["id"] = "q-id"
    source = progress["sources"][0]
    source["startOffset"], source["endOffset"] = {"logOffset": 8}, {"logOffset": 9}
    with capture_logs() as logs:
        listener._progress(progress)
        assert listener.join_recalls(30)
    warned = [e for e in logs if e["event"] == "wmobs.counts_not_reported"]
    assert bool(warned) is suspect


def test_the_recorder_runs_events_through_the_listener_and_serves_them() -> None:
    """``MetricsRecorder.progress`` is the listener's callback (the histogram, the spans with a
    tracer provider, errors swallowed and counted); ``serve`` is the endpoint over HTTP."""
    import urllib.request

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    rec = MetricsRecorder(clock=lambda: NOW, tracer_provider=provider)
    body = progress_json(watermark=NOW - 12) | {"durationMs": {"triggerExecution": 250}}
    rec.progress(json.dumps(body))
    with capture_logs() as logs:
        rec.progress("not json")
    assert rec.errors == 1
    assert [entry["event"] for entry in logs] == ["wmobs.listener_error"]
    assert rec.value("wmobs_batch_duration_seconds_count", query="q") == 1
    assert [span.name for span in spans.get_finished_spans()][-1:] == ["micro-batch q"]
    with rec.serve() as url, urllib.request.urlopen(url, timeout=10) as response:
        served = parse_metrics(response.read().decode())
    assert served[("wmobs_watermark_delay_seconds", (("query", "q"),))] == 12.0
    provider.shutdown()
    rec.shutdown()

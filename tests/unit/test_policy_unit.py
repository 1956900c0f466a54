"""TimePolicy's argument checks that need no DataFrame, and the build of wmobs' JAR (javac;
no Spark session)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from wmobs import DeadLetter, Storage, TimePolicy


def test_defaults_are_azure_stream_analytics() -> None:
    policy = TimePolicy()
    assert (policy.early_arrival, policy.early_arrival_action) == ("5 minutes", "drop")
    assert (policy.late_arrival, policy.late_arrival_action) == ("5 seconds", "adjust")
    assert (policy.out_of_order, policy.out_of_order_action) == ("0 seconds", "adjust")
    assert policy.observation_name.startswith("wmobs.policy.EventTime_")
    assert TimePolicy(name="tolls").observation_name == "wmobs.policy.tolls"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"early_arrival_action": "keep"}, ValueError, "early_arrival_action: must be"),
        ({"late_arrival_action": "Drop"}, ValueError, "late_arrival_action: must be"),
        ({"out_of_order_action": None}, ValueError, "out_of_order_action: must be"),
        ({"late_arrival": "-1 second"}, ValueError, "late_arrival: must not be negative"),
        ({"out_of_order": timedelta(seconds=-1)}, ValueError, "out_of_order: must not be"),
        # Beyond a long of µs once added to a timestamp (wrapped: rows judged wrongly).
        ({"late_arrival": "200000000 days"}, ValueError, "late_arrival: .* longer than 10,000"),
        ({"early_arrival": "9" * 400 + " days"}, ValueError, "early_arrival: .* longer than"),
        ({"out_of_order": timedelta(days=3_650_001)}, ValueError, "out_of_order: .* longer"),
        ({"early_arrival": "soon"}, ValueError, "early_arrival: 'soon' is not a duration"),
        ({"substream_by": "deviceId"}, TypeError, "substream_by: expected a list"),
        ({"substream_by": []}, ValueError, "substream_by: empty"),
        ({"substream_skew": "10 minutes"}, ValueError, "substream_skew: only meaningful with"),
        ({"substream_by": ["d"], "substream_skew": "-1 s"}, ValueError, "substream_skew: must"),
        ({"event_time": ""}, TypeError, "event_time"),
        ({"name": "has space"}, ValueError, "name: use letters"),
        ({"name": ".."}, ValueError, "name: .*not dots alone"),  # the checkpoint's parent
        ({"name": "a/b"}, ValueError, "name: use letters"),
        ({"name": "n" * 129}, ValueError, "name: at most 128 characters .* got 129"),
        ({"distributions": "no"}, TypeError, "distributions: expected True or False"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TimePolicy(**kwargs)  # type: ignore[arg-type]


def test_an_unnamed_policy_gets_a_name_that_a_given_name_could_be() -> None:
    """Generated from the event-time column, stable for the policy, distinct between policies,
    and within the rules a given name must keep (a column name may be long or odd)."""
    column = "payload.event time/" + "x" * 300
    first, second = TimePolicy(event_time=column), TimePolicy(event_time=column)
    assert first.state_name == first.state_name != second.state_name
    for policy in (first, second):
        TimePolicy(name=policy.state_name)  # a name it could have been given
        assert policy.state_name.startswith("payload_event_time_xxx")


def test_an_empty_checkpoint_location_is_an_error_before_anything_is_planned() -> None:
    """An empty string (an unset variable, typically) is not None: it would have fallen back to
    the session's checkpoint root unseen. Checked before the DataFrame is looked at."""
    for empty in ("", "  "):
        with pytest.raises(ValueError, match="checkpoint_location: empty"):
            TimePolicy().apply(object(), checkpoint_location=empty)  # type: ignore[arg-type]


def test_dead_letter_destinations() -> None:
    assert DeadLetter.of("/tmp/dead").directory == "/tmp/dead"
    assert DeadLetter.of(print).function is print
    with pytest.raises(ValueError, match="exactly one"):
        DeadLetter()
    with pytest.raises(TypeError, match="dead_letter: expected"):
        DeadLetter.of(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dead_letter: the directory is empty"):
        DeadLetter.of(" ")


_OPTIONS = Storage(options={"endpoint_url": "http://x"})


@pytest.mark.parametrize(
    ("sink", "jvm", "extra", "expected"),
    [
        (None, True, None, "none"),
        (None, False, None, "none"),
        (DeadLetter("/tmp/dead"), True, None, "jvm"),
        (DeadLetter("/tmp/dead"), True, "array", "jvm"),  # Spark's writer takes every type
        (DeadLetter("s3a://b/dead"), True, "timestamp_ntz", "jvm"),
        (DeadLetter("/tmp/dead"), False, None, "python_dropped"),
        (DeadLetter("/tmp/dead"), False, "array", "python_all"),
        (DeadLetter("/tmp/dead"), False, "timestamp_ntz", "python_all"),
        (DeadLetter(function=print), True, None, "python_dropped"),
        (DeadLetter("/tmp/dead", format="json"), True, None, "python_dropped"),
        (DeadLetter("s3a://b/dead", storage=_OPTIONS), True, None, "python_dropped"),
        (DeadLetter("s3a://b/dead", storage=_OPTIONS), True, "array", "python_all"),
    ],
)
def test_the_dead_letter_plan_is_decided_once_from_the_destination_engine_and_types(
    sink: DeadLetter | None, jvm: bool, extra: str | None, expected: str
) -> None:
    """``choose_plan``, before any session is asked: no destination, counted only; on the JVM
    engine a Parquet directory reached through Hadoop is Spark's writer's, whatever its column
    types; elsewhere Python gets the dropped rows, or every row where a column has no exact text
    form (or PySpark before 4.1 has no Arrow-iterator UDF). Each plan says why."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from wmobs.observations import DEAD_LETTER_PLANS
    from wmobs.policy._deadletter_plan import choose_plan

    other = {"array": T.ArrayType(T.IntegerType()), "timestamp_ntz": T.TimestampNTZType()}
    fields = [T.StructField("id", T.IntegerType())]
    if extra is not None:
        fields.append(T.StructField("x", other[extra]))
    plan = choose_plan(sink, jvm=jvm, schema=T.StructType(fields))
    if expected == "python_dropped" and not hasattr(F, "arrow_udf"):
        expected = "python_all"  # PySpark 4.0
    assert plan.name == expected
    assert plan.name in DEAD_LETTER_PLANS
    assert plan.reason
    if extra is not None and plan.name == "python_all":
        assert "x" in plan.reason


def test_the_jar_of_each_spark_line_is_in_the_package() -> None:
    """``wmobs.jar()`` returns the built JAR of the Spark line asked for (no compiler at run
    time); another line is an error that names the supported ones."""
    import zipfile

    import wmobs
    from wmobs.policy._jvm._extension import LINES

    for line, scala in LINES.items():
        path = wmobs.jar(f"{line}.9")
        assert path.name == f"wmobs-spark-{line}_{scala}.jar"
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            manifest = archive.read("META-INF/MANIFEST.MF").decode()
        assert "io/wmobs/spark/WmobsExtensions.class" in names
        assert not any(name.endswith(".java") for name in names)
        assert f"Wmobs-Spark-Line: {line}" in manifest
        assert f"Implementation-Version: {wmobs.__version__}" in manifest
    with pytest.raises(wmobs.JarError, match=r"no JAR for Spark 3\.4\.1 .*3\.5, 4\.0, 4\.1"):
        wmobs.jar("3.4.1")
    assert wmobs.JarBuildError is wmobs.JarError  # its name while it was compiled at run time


def test_the_session_builder_helper_adds_to_what_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wmobs.configure_spark`` keeps the builder's own jars and extensions."""
    import wmobs

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf
    from wmobs.policy import EXTENSIONS

    class Builder:
        def __init__(self) -> None:
            self._options: dict[str, str] = {"spark.jars": "/a.jar"}

        def config(self, key: str, value: str) -> Builder:
            self._options[key] = value
            return self

    builder = wmobs.configure_spark(Builder(), "4.1.4")
    assert builder._options["spark.jars"] == f"/a.jar,{wmobs.jar('4.1.4')}"
    assert builder._options["spark.sql.extensions"] == EXTENSIONS
    again = wmobs.configure_spark(builder, "4.1.4")._options
    assert again["spark.jars"].count(".jar") == 2
    assert wmobs.policy.submit_args("4.1.0") == [
        "--jars",
        str(wmobs.jar("4.1.0")),
        "--conf",
        f"spark.sql.extensions={EXTENSIONS}",
    ]


def test_the_helpers_keep_what_spark_defaults_conf_configures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's ``spark-defaults.conf`` with Delta's extension and a JAR of its own: a value
    on the command line or the builder would replace it, so the helpers list it first."""
    import wmobs
    from wmobs.policy import EXTENSIONS
    from wmobs.policy._jvm._extension import spark_defaults

    (tmp_path / "spark-defaults.conf").write_text(
        "# a cluster's defaults\n"
        "spark.sql.extensions   io.delta.sql.DeltaSparkSessionExtension\n"
        "spark.jars=/opt/jars/delta.jar, /opt/jars/other.jar\n"
        "! a comment too\n"
        "spark.executor.memory: 4g\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert spark_defaults()["spark.executor.memory"] == "4g"
    mine = str(wmobs.jar("4.1.0"))
    delta = "io.delta.sql.DeltaSparkSessionExtension"
    assert wmobs.policy.submit_args("4.1.0") == [
        "--jars",
        f"/opt/jars/delta.jar,/opt/jars/other.jar,{mine}",
        "--conf",
        f"spark.sql.extensions={delta},{EXTENSIONS}",
    ]

    class Builder:
        def __init__(self, options: dict[str, str]) -> None:
            self._options = options

        def config(self, key: str, value: str) -> Builder:
            self._options[key] = value
            return self

    built = wmobs.configure_spark(Builder({}), "4.1.0")._options
    assert built["spark.sql.extensions"] == f"{delta},{EXTENSIONS}"
    assert built["spark.jars"] == f"/opt/jars/delta.jar,/opt/jars/other.jar,{mine}"
    # What the builder sets replaces the defaults in Spark too: it is what is kept.
    own = wmobs.configure_spark(Builder({"spark.sql.extensions": "x.Ext"}), "4.1.0")._options
    assert own["spark.sql.extensions"] == f"x.Ext,{EXTENSIONS}"
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))  # no file: nothing to keep
    assert spark_defaults() == {}


def test_json_dead_letters_keep_every_value_exact() -> None:
    """pandas' JSON would turn a long column with a null into doubles, cut doubles to ten
    digits, timestamps to the millisecond and NaN to null."""
    import datetime
    import decimal
    import json

    import pyarrow as pa

    from wmobs.policy._deadletter import json_lines

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=datetime.timezone.utc)
    table = pa.table(
        {
            "id": pa.array([9007199254740993, None], pa.int64()),
            "x": pa.array([1.23456789012e-5, float("nan")], pa.float64()),
            "at": pa.array([when, None], pa.timestamp("us", tz="UTC")),
            "price": pa.array(
                [decimal.Decimal("12345678901234567.89"), None], pa.decimal128(19, 2)
            ),
            "raw": pa.array([b"\xff\x00", None], pa.binary()),
            "text": pa.array(["é", None], pa.string()),
        }
    )
    first, second = [json.loads(line) for line in json_lines(table).decode().splitlines()]
    assert first["id"] == 9007199254740993 and isinstance(first["id"], int)
    assert first["x"] == 1.23456789012e-5
    assert second["x"] != second["x"]  # NaN, not null
    assert datetime.datetime.fromisoformat(first["at"]) == when
    assert first["price"] == "12345678901234567.89"
    assert first["raw"] == "/wA="
    assert first["text"] == "é"
    assert second == {
        "id": None,
        "x": second["x"],
        "at": None,
        "price": None,
        "raw": None,
        "text": None,
    }


def test_an_input_with_the_columns_dead_letters_add_is_refused() -> None:
    from wmobs.policy._deadletter import check_input_columns

    check_input_columns(["id", "EventTime", "batch_id"])
    with pytest.raises(ValueError, match="dead_letter: column 'wmobs_policy' is one that dead"):
        check_input_columns(["id", "wmobs_rule", "wmobs_policy"])


def test_a_policy_in_a_pipeline_is_handed_over_in_microseconds_and_named_after_its_flow() -> None:
    """In a pipeline's query function the extension reads the policy's options: durations as
    Python resolved them (Java's parser reads neither a non-breaking space nor another
    script's digits), and an unnamed policy named after its flow, the same in every run
    (not counted in the order the pipeline imports its files)."""
    from wmobs.policy._pipeline import flow_policy_name, sql_options

    policy = TimePolicy(
        late_arrival="5\u00a0minutes",
        out_of_order=timedelta(seconds=2),
        substream_by=["deviceId"],
        idle_timeout="\u0661 minute",
    )
    options = sql_options(
        policy, name="judged", sink=None, checkpoint_location=None, arrival_default=True
    )
    assert options["late_arrival"] == "300000000 microseconds"
    assert options["out_of_order"] == "2000000 microseconds"
    assert options["idle_timeout"] == "60000000 microseconds"
    assert options["early_arrival"] == "300000000 microseconds"
    assert (options["substream_ttl"], options["idle_check_interval"]) == (None, None)
    assert options["name"] == "judged"
    assert "arrival_time" not in options
    assert (
        flow_policy_name("spark_catalog.default.judged", longest=128)
        == "spark_catalog.default.judged"
    )
    assert flow_policy_name("my flow/ä", longest=128) == "my_flow_"
    assert flow_policy_name("..", longest=128) == "_"
    assert len(flow_policy_name("f" * 300, longest=128)) == 128

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
        ({"early_arrival": "soon"}, ValueError, "early_arrival: 'soon' is not a duration"),
        ({"substream_by": "deviceId"}, TypeError, "substream_by: expected a list"),
        ({"substream_by": []}, ValueError, "substream_by: empty"),
        ({"event_time": ""}, TypeError, "event_time"),
        ({"name": "has space"}, ValueError, "name: use letters"),
        ({"distributions": "no"}, TypeError, "distributions: expected True or False"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        TimePolicy(**kwargs)  # type: ignore[arg-type]


def test_dead_letter_destinations() -> None:
    assert DeadLetter.of("/tmp/dead").directory == "/tmp/dead"
    assert DeadLetter.of(print).function is print
    with pytest.raises(ValueError, match="exactly one"):
        DeadLetter()
    with pytest.raises(TypeError, match="dead_letter: expected"):
        DeadLetter.of(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sink", "extra"),
    [
        (DeadLetter(function=print), None),
        (DeadLetter("/tmp/dead", format="json"), None),
        (DeadLetter("s3a://b/dead", storage=Storage(options={"endpoint_url": "http://x"})), None),
        (DeadLetter("/tmp/dead"), "array"),
        (DeadLetter("/tmp/dead"), "timestamp_ntz"),
    ],
)
def test_dead_letters_the_jar_does_not_write(sink: DeadLetter, extra: str | None) -> None:
    """Where the JAR's Parquet writer does not apply, ``dead_letter_writer`` says so before it
    looks for a session (the caller then hands dropped rows to Python): function and JSON
    destinations, storage with options of its own (fsspec's credentials, not Hadoop's), and
    columns that are not flat scalars."""
    from pyspark.sql import types as T

    from wmobs.policy.deadletter import dead_letter_writer

    other = {"array": T.ArrayType(T.IntegerType()), "timestamp_ntz": T.TimestampNTZType()}
    fields = [T.StructField("id", T.IntegerType())]
    if extra is not None:
        fields.append(T.StructField("x", other[extra]))
    struct = T.StructType(fields)
    assert (
        dead_letter_writer(sink, struct, "v", 1, [], spark=None, timezone="UTC", large_types=False)
        is None
    )


def test_the_jar_is_built_from_its_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wmobs.jar()`` compiles the JVM functions with the JDK here, into a fresh place."""
    import zipfile

    import wmobs
    from wmobs.policy import _jvm

    monkeypatch.setattr(_jvm, "_target", lambda: tmp_path / "built" / _jvm.JAR_NAME)
    built = wmobs.jar()
    assert built == tmp_path / "built" / _jvm.JAR_NAME
    with zipfile.ZipFile(built) as archive:
        assert "io/wmobs/spark/BatchTimes.class" in archive.namelist()
    assert wmobs.jar().stat().st_mtime == built.stat().st_mtime  # up to date: not rebuilt
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    built.unlink()
    with pytest.raises(wmobs.JarBuildError, match="needs a JDK"):
        wmobs.jar()

"""``wmobs demo``'s arguments: what it cannot run with is said before Spark starts (its tests
with Spark are tests/spark/test_demo.py)."""

from __future__ import annotations

import socket

import pytest

from wmobs.demo import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--rate", "0"], "--rate: at least 1 event per second, got 0"),
        (["--duration", "-5"], "--duration: a number of seconds above 0, got -5"),
        (["--idle-every", "10", "--idle-for", "10"], "--idle-for: from 0 to less than"),
        (["--idle-for", "-1"], "--idle-for: from 0 to less than"),
        (["--idle-every", "-1"], "--idle-every: seconds (0: no idle gaps), got -1"),
        (["--trigger", "soon"], "--trigger: 'soon' is not a duration"),
        (["--port", "70000"], "--port: from 0 to 65535, got 70000"),
    ],
)
def test_what_the_demo_cannot_run_with_is_a_usage_error(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


def test_a_port_in_use_is_one_line_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """A second demo (or anything on its port): one line naming the address, exit 1, where it
    started Spark and then failed in wmobs.attach with a traceback."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        assert main(["--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"wmobs demo: cannot serve /metrics on 127.0.0.1:{port}: ")
    assert err.rstrip().endswith("choose another with --port") and len(err.splitlines()) == 1

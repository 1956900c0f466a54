"""The tolerance advisor on distributions of known values: each suggestion keeps at least its
fraction, the next smaller bound would not, and a configured tolerance's share is bracketed."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from wmobs.advise import advise, main
from wmobs.listener._exposition import Exposition, MetricsServer
from wmobs.listener._tracker import Tracker
from wmobs.observations import HISTOGRAMS
from wmobs.testing import progress_json

_RANDOM = random.Random(7)
LATENESS = [0.0] * 9_000 + [_RANDOM.uniform(0.0, 600.0) for _ in range(950)]
LATENESS += [_RANDOM.uniform(600.0, 20_000.0) for _ in range(50)]
DELAYS = [_RANDOM.uniform(-30.0, 90.0) for _ in range(10_000)]


def _columns(histogram: str, values: list[float]) -> dict[str, Any]:
    """What ``histogram_counts`` observes for ``values`` (seconds), counted one by one."""
    micros = [round(v * 1e6) for v in values]
    bounds = [round(b * 1e6) for b in HISTOGRAMS[histogram]]
    per_index = Counter(sum(m > b for b in bounds) for m in micros)
    return {
        f"hist:{histogram}:buckets": [{"x": i, "y": float(n)} for i, n in per_index.items()],
        f"hist:{histogram}:sum_us": sum(micros),
    }


def _tracker() -> Tracker:
    tracker = Tracker(clock=lambda: 1_800_000_000.0)
    observed = _columns("lateness", LATENESS) | _columns("arrival_delay", DELAYS)
    tracker.on_progress(progress_json(name="q", observed={"wmobs.policy.sensors": observed}))
    return tracker


def _kept(values: list[float], tolerance: float) -> float:
    return sum(v <= tolerance for v in values) / len(values)


def test_each_suggestion_keeps_its_fraction_and_no_smaller_bound_would() -> None:
    (advice,) = advise(Exposition(_tracker()).render().decode())
    assert (advice.query, advice.policy, advice.rows) == ("q", "sensors", 10_000)
    by_name = {t.tolerance: t for t in advice.tolerances}
    bounds = [b for b in HISTOGRAMS["lateness"] if b >= 0]
    for fraction, seconds in by_name["out_of_order"].suggested_s.items():
        assert seconds is not None and _kept(LATENESS, seconds) >= fraction
        smaller = [b for b in bounds if b < seconds]
        assert not smaller or _kept(LATENESS, smaller[-1]) < fraction
    # 9,000 on time, 950 up to 10 min late, 50 later: 99 % needs 10 min, 99.9 % and more a day
    assert by_name["out_of_order"].suggested_s[0.99] == 600.0
    late = by_name["late_arrival"].suggested_s
    assert late[0.99] == 120.0 and _kept(DELAYS, 120.0) >= 0.99  # every delay is below 90 s
    early = by_name["early_arrival"].suggested_s
    assert early[0.99] == 60.0  # no event more than 30 s early: 60 s is the first bound >= 30
    assert sum(d < -60.0 for d in DELAYS) == 0


def test_a_configured_tolerance_reports_what_it_drops() -> None:
    (advice,) = advise(
        Exposition(_tracker()).render().decode(),
        configured={"sensors": {"out_of_order": "10 seconds", "late_arrival": 20}},
    )
    by_name = {t.tolerance: t for t in advice.tolerances}
    ooo = by_name["out_of_order"]
    assert ooo.configured_s == 10.0
    exact = 1 - _kept(LATENESS, 10.0)
    assert ooo.dropped_fraction == (pytest.approx(exact), pytest.approx(exact))  # a bound
    late = by_name["late_arrival"]
    low, high = late.dropped_fraction or (None, None)
    assert low is not None and high is not None
    assert low <= 1 - _kept(DELAYS, 20.0) <= high  # between the bounds 10 s and 30 s
    assert low < high


def test_the_command_reads_an_endpoint_and_draws_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = MetricsServer("127.0.0.1", 0, Exposition(_tracker()))
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        plot = tmp_path / "lateness.png"
        code = main(["--metrics-url", url, "--out-of-order", "10 seconds", "--plot", str(plot)])
    finally:
        server.shutdown()
        server.server_close()
    out = capsys.readouterr().out
    assert code == 0
    assert "query q, policy sensors (10000 rows judged)" in out
    assert "out_of_order" in out and "600 s" in out and "10 s: drops or adjusts" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_it_cannot_draw_is_said_before_fetching_or_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib (an extra: ``wmobs[plot]``), ``--plot`` is a usage error before
    anything is fetched; a plot file it cannot write is one line, exit 1 (tracebacks before,
    after the report)."""
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "matplotlib", None)  # as if not installed
        with pytest.raises(SystemExit) as usage:
            main(["--metrics-url", "http://127.0.0.1:9/metrics", "--plot", "x.png"])
    assert usage.value.code == 2
    assert "--plot needs matplotlib: pip install 'wmobs[plot]'" in capsys.readouterr().err

    server = MetricsServer("127.0.0.1", 0, Exposition(_tracker()))
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        nowhere = tmp_path / "no-such-folder" / "lateness.png"
        code = main(["--metrics-url", url, "--plot", str(nowhere)])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"wmobs advise: cannot write the plot to {nowhere}: ")
    assert len(err.splitlines()) == 1


def test_nothing_to_advise_on_is_said() -> None:
    tracker = Tracker()
    tracker.on_progress(progress_json(name="q"))
    assert advise(Exposition(tracker).render().decode()) == []


def test_what_cannot_be_read_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    """An endpoint that refuses, a Prometheus that refuses the query (it says why in JSON), a
    server that is not Prometheus, a tolerance that is no duration: one line each, no
    traceback (the command printed urllib's before)."""
    import http.server
    import json
    import socket
    import threading

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]

    class Answers(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/prometheus/"):
                body, status = json.dumps({"status": "error", "error": "bad range"}), 400
            else:
                body, status = "<html>a web page</html>", 200
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    here = f"http://127.0.0.1:{server.server_port}"
    try:
        cases = {
            ("--metrics-url", f"http://127.0.0.1:{closed}/metrics"): (
                f"cannot read http://127.0.0.1:{closed}/metrics: [Errno 111] Connection refused"
            ),
            ("--metrics-url", "metrics"): "cannot read metrics: unknown url type: 'metrics'",
            ("--prometheus", f"{here}/prometheus", "--query", "q"): (
                f"{here}/prometheus/api/v1/query answered: bad range"
            ),
            ("--prometheus", here, "--query", "q"): f"{here} answered no Prometheus query result",
        }
        for argv, said in cases.items():
            assert main(list(argv)) == 1
            err = capsys.readouterr().err
            assert err.startswith(f"wmobs advise: {said}") and err.count("\n") == 1, err
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(SystemExit) as exited:
        main(["--metrics-url", f"{here}/metrics", "--out-of-order", "banana"])
    assert exited.value.code == 2
    assert "--out-of-order: 'banana' is not a duration" in capsys.readouterr().err

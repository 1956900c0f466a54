"""The Python engine's counts kept beside the checkpoint (``wmobs.policy._python._kept``): what a
task counts, how the tasks' files are read back and merged, and that the listener folds them as
it folds what ``observe`` reports."""

from __future__ import annotations

from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

from wmobs.listener._tracker import Tracker  # noqa: E402
from wmobs.observations import (  # noqa: E402
    DEAD_LETTER_COLUMN,
    IDLE_TIMEOUT_COLUMN,
    histogram_sum_column,
    joint_histogram_column,
    rule_column,
)
from wmobs.policy._python._kept import (  # noqa: E402
    KEPT_PREFIX,
    VERDICT_WIDTH,
    Tally,
    forget_kept,
    kept_file,
    kept_folder,
    merge_kept,
    read_kept,
)
from wmobs.policy._storage import Storage  # noqa: E402
from wmobs.policy._verdicts import DROPPED_BITS, VERDICT_BITS  # noqa: E402
from wmobs.testing import progress_json  # noqa: E402

LATE = rule_column("late_arrival", "adjusted")
EARLY = rule_column("early_arrival", "dropped")
JOINT = joint_histogram_column(("arrival_delay", "lateness"))
DELAY_SUM = histogram_sum_column("arrival_delay")


def _tally() -> Tally:
    bits = [
        (LATE, VERDICT_BITS[("late_arrival", "adjusted")]),
        (EARLY, VERDICT_BITS[("early_arrival", "dropped")]),
        (DEAD_LETTER_COLUMN, DROPPED_BITS),
    ]
    columns = [("firings", IDLE_TIMEOUT_COLUMN), ("sum", DELAY_SUM)]
    return Tally(bits, [(JOINT, VERDICT_WIDTH, 16)], columns)


def _batch(verdicts: list[int], idle: list[int], buckets: list[int], delays: list[float]) -> list:
    """The columns keep_counts passes: verdict and bucket packed (-1: no bucket), then the
    rest."""
    packed = [v | ((b + 1) << VERDICT_WIDTH) for v, b in zip(verdicts, buckets, strict=True)]
    return [np.array(packed), np.array(idle), np.array(delays)]


def test_a_task_counts_what_observe_counts_of_its_rows() -> None:
    """Verdict bits, dropped rows, firings (synthetic rows' positive idle column), bucket
    indexes (none: not counted) and sums (NaN: none), over two Arrow batches."""
    late = VERDICT_BITS[("late_arrival", "adjusted")]
    early = VERDICT_BITS[("early_arrival", "dropped")]
    tally = _tally()
    tally.add(
        *_batch(
            [0, late, early, late | early],
            [-1, -1, 3, -1],
            [4, 4, -1, 474],
            [1.0, 2.0, np.nan, 5.0],
        )
    )
    tally.add(*_batch([late], [2], [474], [10.0]))
    assert tally.rows == 5
    assert tally.counts == {
        LATE: 3,
        EARLY: 2,
        DEAD_LETTER_COLUMN: 2,
        IDLE_TIMEOUT_COLUMN: 5,
        JOINT: {"4": 2, "474": 2},
        DELAY_SUM: 18.0,
    }


def test_the_tasks_files_of_the_batch_and_query_are_merged(tmp_path: Path) -> None:
    """Files of another micro-batch or another query in the same folder are left out; the
    merged buckets are ``histogram_numeric``'s points, as the listener reads them; the task of
    partition 0 removes the files of micro-batches long past."""
    storage = Storage()
    checkpoint = str(tmp_path / "ckpt")
    late = VERDICT_BITS[("late_arrival", "adjusted")]
    for partition, (query, batch, rows) in enumerate(
        [("q", 4, 1), ("q", 4, 2), ("q", 3, 100), ("other", 4, 1000)]
    ):
        tally = _tally()
        tally.add(*_batch([late] * rows, [-1] * rows, [partition] * rows, [1.0] * rows))
        target = kept_file(checkpoint, "p", batch, partition)
        storage.write_once(target, tally.to_json(query, batch))
    assert Path(kept_file(checkpoint, "p", 4, 0)).name == f"{KEPT_PREFIX}4-0.json"
    merged = read_kept(storage, checkpoint, "p", "q", 4)
    assert merged is not None
    assert merged[LATE] == 3
    assert merged[DELAY_SUM] == 3.0
    assert merged[JOINT] == [{"x": 0.0, "y": 1.0}, {"x": 1.0, "y": 2.0}]
    assert read_kept(storage, checkpoint, "p", "q", 3) is not None
    assert read_kept(storage, checkpoint, "p", "q", 5) is None
    assert read_kept(storage, str(tmp_path / "none"), "p", "q", 4) is None
    assert read_kept(storage, None, "p", "q", 4) is None
    (tmp_path / "ckpt" / "wmobs" / "observations" / "p" / "counts-x-1.json").write_text("{}")
    forget_kept(storage, kept_folder(checkpoint, "p"), 4)
    names = sorted(e.name for e in storage.files(kept_folder(checkpoint, "p")))
    assert names == ["counts-4-0.json", "counts-4-1.json", "counts-4-3.json", "counts-x-1.json"]


def test_recalled_counts_fold_into_the_counters_as_observed_ones() -> None:
    """The same counts, recalled after the micro-batch's progress or reported in it, give the
    same counters and distributions."""
    parts = [{LATE: 2, JOINT: {"13": 2}, DELAY_SUM: 4.0e6}, {LATE: 1, JOINT: {"13": 1, "0": 4}}]
    recalled, reported = Tracker(clock=lambda: 0.0), Tracker(clock=lambda: 0.0)
    merged = merge_kept(parts)
    recalled.on_progress(
        progress_json(batch_id=1, observed={"wmobs.policy.p": {"engine": "python"}})
    )
    query = recalled.snapshots()[0].query_id
    recalled.on_recalled(query, "p", merged)
    reported.on_progress(
        progress_json(batch_id=1, observed={"wmobs.policy.p": {"engine": "python", **merged}})
    )
    one, other = recalled.snapshots()[0].policies["p"], reported.snapshots()[0].policies["p"]
    assert one == other
    assert one.events[("late_arrival", "adjusted")] == 3
    assert sum(one.histograms["arrival_delay"].buckets) == 7

"""The JVM engine's specs, one dataclass per function (wmobs/policy/_jvm/_specs.py): the
reference file that the Java parsers are checked against (SpecTest.java) says what the
dataclasses say, and a spec's JSON has every member, null where unset."""

from __future__ import annotations

import json
from pathlib import Path

from wmobs.policy._jvm._specs import (
    CALLED_BY_NAME,
    SPECS,
    DeadLettersSpec,
    HistogramSpec,
    KeptSpec,
    QueueingSpec,
    members,
    to_json,
)

REFERENCE = Path(__file__).resolve().parents[1] / "reference" / "jvm_specs.json"


def test_the_reference_says_what_the_dataclasses_say() -> None:
    found = json.loads(REFERENCE.read_text())
    assert found["specs"] == {
        name: {"members": members(cls), "optional": CALLED_BY_NAME.get(name, [])}
        for name, cls in SPECS.items()
    }, f"update {REFERENCE} from wmobs/policy/_jvm/_specs.py"
    assert found["nested"] == {
        "wmobs_policy_observation.histogram": members(HistogramSpec),
        "wmobs_policy_observation.queueing": members(QueueingSpec),
        "wmobs_policy_observation.kept": members(KeptSpec),
    }


def test_a_spec_is_written_with_every_member() -> None:
    text = to_json(DeadLettersSpec(directory="/dl", rules=[["late_arrival", 2]], policy="p"))
    assert json.loads(text) == {"directory": "/dl", "rules": [["late_arrival", 2]], "policy": "p"}
    nested = json.loads(to_json(KeptSpec(checkpoint="", directory="wmobs/observations/p")))
    assert sorted(nested) == ["checkpoint", "directory"]

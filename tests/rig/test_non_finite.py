"""Non-finite figures (issue 38): JSON has no NaN or infinity, so a run folder holding one was
edited or damaged. Loading events refuses it naming the file, the line, the event and the field;
a manifest holding one is damaged (named); the rig never writes one into a manifest or a
report's results.json (`json.dumps(..., allow_nan=False)`), and says which field was not
finite."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rig.cli import main
from rig.errors import NonFiniteError
from rig.run.events import RunFinished, RunStarted
from rig.run.finite import NonFiniteWatch, finite_json, first_non_finite
from rig.run.store import MANIFEST, RunStore, load_run, read_manifest
from tests.rig.test_damaged_manifest import asc_run

#: How a non-finite number is spelled in a JSON file (Python's json reads each), and its value.
SPELLINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf, "1e999": math.inf,
             # Past float range by a three-digit exponent, one with a leading zero, or by a
             # long integer part alone: json hands each to parse_float as text.
             "-17.25E+308": -math.inf, "1e0400": math.inf, "2" + "0" * 320 + ".5": math.inf}


def poison_event(run: Path, kind: str, nth: int, field: str, text: str) -> int:
    """Put `text` as `field` of the `nth` event of `kind` in events.jsonl; its line number."""
    path = run / "events.jsonl"
    lines = path.read_text().splitlines()
    seen = 0
    for number, line in enumerate(lines, start=1):
        record = json.loads(line)
        if record["event"] != kind:
            continue
        if seen == nth:
            old = f'"{field}": {json.dumps(record[field])}'
            assert old in line
            lines[number - 1] = line.replace(old, f'"{field}": {text}')
            path.write_text("\n".join(lines) + "\n")
            return number
        seen += 1
    raise AssertionError(f"no {kind} #{nth}")


@pytest.mark.parametrize("text", sorted(SPELLINGS), ids=lambda t: t[:12])
def test_a_non_finite_event_field_is_refused_on_load_by_name(tmp_path: Path, text: str) -> None:
    run = asc_run(tmp_path, finished=True)
    line = poison_event(run, "latency_run", 1, "inferences_per_s", text)
    with pytest.raises(NonFiniteError) as caught:
        load_run(run)
    message = caught.value.message
    assert message.startswith(f"{run / 'events.jsonl'} line {line}: ")
    assert "latency_run event (index 1)" in message
    assert f"inferences_per_s is {json.dumps(SPELLINGS[text])}" in message


def test_show_and_report_refuse_it_in_one_line(tmp_path: Path, capsys) -> None:
    run = asc_run(tmp_path, finished=True)
    line = poison_event(run, "latency_run", 0, "inferences_per_s", "NaN")
    assert main(["show", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"events.jsonl line {line}: " in err
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out), "--format", "md"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "inferences_per_s is NaN" in err
    assert not (out / "results.json").exists()


def test_a_nested_field_is_named_by_its_path(tmp_path: Path) -> None:
    run = asc_run(tmp_path, finished=True)
    path = run / "events.jsonl"
    path.write_text(path.read_text().replace('"energy_per_inference_j": 4.5e-05}',
                                             '"energy_per_inference_j": -Infinity}'))
    with pytest.raises(NonFiniteError, match=r"run_finished event: "
                                             r"summary\.energy_per_inference_j is -Infinity"):
        load_run(run)


def test_a_non_finite_manifest_figure_makes_the_manifest_damaged_by_name(tmp_path: Path) -> None:
    run = asc_run(tmp_path, finished=True)
    path = run / MANIFEST
    path.write_text(path.read_text().replace('"inferences_per_s": 80.0',
                                             '"inferences_per_s": NaN'))
    manifest, why = read_manifest(path)
    assert manifest == {}
    assert why == f"{MANIFEST} holds NaN at summary.inferences_per_s, not a finite number"


def test_the_run_store_never_writes_a_non_finite_manifest(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "asc", "sim")
    store(RunStarted(run_id="r1", procedure="asc", device="sim", simulated=True,
                     manifest={"bench": {"name": "b"}}))
    with pytest.raises(NonFiniteError) as caught:
        store(RunFinished(status="complete", summary={"inferences_per_s": math.nan}))
    assert caught.value.message == (
        f"cannot write {store.path / MANIFEST}: summary.inferences_per_s is NaN, not a finite "
        "number (JSON has no NaN or Infinity)")
    text = (store.path / MANIFEST).read_text()
    assert "NaN" not in text and json.loads(text)["status"] == "running"


def test_finite_json_names_the_first_non_finite_value() -> None:
    assert finite_json({"a": [1.0, 2]}, "x.json") == '{"a": [1.0, 2]}'
    with pytest.raises(NonFiniteError, match=r"cannot write results\.json: runs\[1\]\.show\.u "
                                             r"is Infinity"):
        finite_json({"runs": [{}, {"show": {"u": math.inf}}]}, "results.json", indent=2)
    assert first_non_finite({"a": {"b": (1, -math.inf)}}) == ("a.b[1]", -math.inf)
    assert first_non_finite({"ok": [1, 2.5, None, "NaN", True]}) is None



#: Texts on which a quick JSON parser could part from json: numbers at the edges of float
#: range and past 64-bit integers, duplicate keys, lone surrogates, JSON's own refusals, and
#: the non-finite spellings above (each must come out as json reads it).
EDGE_TEXTS = [
    '{"a": 1, "a": 2}', '"\\ud83d\\ude00"', '"\\ud83d"', '["x\\udc00y"]', "1" * 30,
    "123456789012345678901", "-9223372036854775809", "18446744073709551616", "-0", "-0.0",
    "-0e0", "1E+2", "0.1e1", "1e-400", "-1e-400", "5e-324", "2.4703282292062327e-324",
    "1.7976931348623158079e308", "9007199254740993", '"\\u2028"', '"\\/"', " \t[1]\r\n",
    '{"x": [1, 2.5, null, true, false, ""]}', '"a\\u0000b"',
    # json refuses each of these (so must the watch, with json's own error)
    '"a\x01b"', "01", "1.", ".5", "+1", "-", '"\\x"', "[1,]", '{"a":1,}', "[1 2]", "{1:2}",
    "tru", "\x0b[1]", "123abc", "[1] x", "",
    *SPELLINGS, *(f'{{"v": [0.5, {t}]}}' for t in SPELLINGS),
]


@pytest.mark.parametrize("text", EDGE_TEXTS, ids=lambda t: repr(t[:16]))
def test_the_watch_reads_what_json_reads_and_notes_every_non_finite_number(text: str) -> None:
    try:
        expected: object = json.loads(text)
    except json.JSONDecodeError as exc:
        expected = exc
    watch = NonFiniteWatch()
    if isinstance(expected, json.JSONDecodeError):
        with pytest.raises(json.JSONDecodeError) as caught:
            watch.loads(text)
        assert (caught.value.msg, caught.value.pos) == (expected.msg, expected.pos)
        return
    got = watch.loads(text)
    assert repr(got) == repr(expected)  # types too: an int stays an int, -0.0 keeps its sign
    assert watch.seen == (first_non_finite(expected) is not None)


def test_a_finite_text_is_read_by_the_quick_parser_alone(monkeypatch) -> None:
    """The quick path is taken (json's scanner never runs on an ordinary line), and where it
    refuses a text, json reads it."""
    watch = NonFiniteWatch()

    def scan(*_args: object) -> None:
        raise AssertionError("json's scanner ran on a finite text")

    monkeypatch.setattr(watch, "_scan", scan)
    monkeypatch.setattr(watch, "_decoder", None)
    assert watch.loads('{"event": "latency_run", "inferences_per_s": 12.5, "index": 3}') == {
        "event": "latency_run", "inferences_per_s": 12.5, "index": 3}
    assert not watch.seen
    slow = NonFiniteWatch()
    assert math.isnan(slow.loads('{"v": NaN}')["v"]) and slow.seen

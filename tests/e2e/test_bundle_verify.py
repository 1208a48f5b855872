"""`rig keys`, `rig bundle`, `rig verify` on virtual-bench runs (issue 38): an honest bundle
passes; each way to cheat that concerns the bundle as a whole is caught by name.

The cheats are done as an insider would: files edited in an extracted bundle, then everything
re-sealed (`reseal`: new digests, a new statement, signed with whatever key the cheat has), so
that the signature and the digests hold and only what the bundle cannot recompute gives it
away (the ledger, the raw samples, the report made again).

Most commands run in this process (`rig_in_process`): each `rig verify` re-derives and draws a
report again, and a new interpreter's start-up and imports nearly doubled its CPU. Each command
is still run once as a user runs it (`rig`): verify's table, keys' and bundle's refusals, the
QUBO point's measure and report.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from rig.run.ledger import canonical
from rig.submission.bundle import ENVELOPE, SIGNER
from rig.submission.statement import load_private_key, public_pem, sign, statement

from .runs import RIG, rig_in_process

pytestmark = pytest.mark.slow


def rig(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*RIG, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    """Three ASC runs in one runs folder; a report of the first and the third; lab keys; the
    bundle of runs 1 and 3 with the report (run 2 left out)."""
    tmp = tmp_path_factory.mktemp("lab")
    runs = tmp / "runs"
    for _ in range(3):
        done = rig_in_process("measure", "asc", "--device", "sim", "--runs-dir", str(runs))
        assert done.returncode == 0, done.stderr
    folders = sorted(p for p in runs.iterdir() if p.is_dir())
    report = tmp / "report"
    done = rig_in_process("report", str(folders[0]), str(folders[2]), "--out", str(report),
                          "--format", "md")
    assert done.returncode == 0, done.stderr
    done = rig_in_process("keys", "new", "--out", str(tmp / "lab"))
    assert done.returncode == 0, done.stderr
    rig_in_process("keys", "new", "--out", str(tmp / "other"))
    bundle = tmp / "submission.zip"
    done = rig_in_process("bundle", str(folders[0]), str(folders[2]), "--report", str(report),
                          "--key", str(tmp / "lab.key"), "--out", str(bundle))
    assert done.returncode == 0, done.stderr
    return {"tmp": tmp, "runs": folders, "report": report, "bundle": bundle,
            "key": tmp / "lab.key", "pub": tmp / "lab.pub", "other": tmp / "other.key",
            "other_pub": tmp / "other.pub"}


def verify(bundle: Path, *args: str) -> tuple[int, dict]:
    """`rig verify BUNDLE --json ARGS` in this process: its exit code and its JSON."""
    done = rig_in_process("verify", str(bundle), "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def failing(result: dict) -> set[str]:
    return {c["item"] for c in result["checks"] if c["ok"] is False}


def extract(bundle: Path, where: Path) -> Path:
    with zipfile.ZipFile(bundle) as z:
        z.extractall(where)
    return where


def reseal(folder: Path, key: Path, out: Path) -> Path:
    """What an insider does after editing an extracted bundle: every digest recomputed, the
    statement's predicate kept, signed again with `key`."""
    envelope = json.loads((folder / ENVELOPE).read_text())
    import base64

    predicate = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and p.name not in (ENVELOPE, SIGNER))
    subjects = {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in files}
    private = load_private_key(key)
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(ENVELOPE, json.dumps(sign(statement(subjects, predicate), private)))
        z.writestr(SIGNER, public_pem(private.public_key()))
        for p in files:
            z.write(p, p.relative_to(folder).as_posix())
    return out


# -- honest ------------------------------------------------------------------------------------
def test_an_honest_bundle_passes_and_names_the_run_left_out(lab) -> None:
    code, result = verify(lab["bundle"], "--key", str(lab["pub"]))
    assert code == 0, failing(result)
    assert result["ok"] and result["key_given"]
    assert result["runs"] == [lab["runs"][0].name, lab["runs"][2].name]
    items = {c["item"] for c in result["checks"] if c["ok"]}
    assert {"signature", "file digests", "ledger chain", "run in the ledger",
            "report regenerated"} <= items
    # a run left out between two bundled ones: named, with its status and figures
    (left,) = result["left_out"]
    assert left["run"] == lab["runs"][1].name and left["status"] == "complete"
    manifest = json.loads((lab["runs"][1] / "manifest.json").read_text())
    assert left["figures"]["energy_per_inference_j"] == \
        manifest["summary"]["energy_per_inference_j"]
    table = rig("verify", str(lab["bundle"]), "--key", str(lab["pub"]))
    assert table.returncode == 0 and f"left out: {lab['runs'][1].name}" in table.stdout
    # Progress from the threads re-deriving the runs reaches the terminal, each line whole,
    # though another thread may be reading a trace under a capture of stderr meanwhile.
    for run in result["runs"]:
        assert f"rig: re-deriving {run} from its raw samples\n" in table.stderr


def test_runs_re_derived_together_find_what_one_at_a_time_finds(
        lab, monkeypatch: pytest.MonkeyPatch) -> None:
    from rig.submission import rederive
    from rig.submission import verify as verify_module

    folders = lab["runs"]
    monkeypatch.setattr(verify_module.os, "sched_getaffinity", lambda _pid: {0, 1, 2},
                        raising=False)
    monkeypatch.setattr(verify_module, "_available_memory", lambda: 1 << 40)
    assert verify_module.rederive_workers(folders) == 3
    said: list[str] = []
    together = verify_module.rederive_runs(folders, {}, said.append)
    assert together == [rederive.asc_checks(f, None) for f in folders]
    assert sorted(said) == sorted(f"re-deriving {f.name} from its raw samples" for f in folders)
    # Memory bounds it: the traces read together may take at most half of what is free.
    largest = max(verify_module._trace_bytes(f) for f in folders)
    assert largest > 0
    monkeypatch.setattr(verify_module, "_available_memory", lambda: int(9 * largest))
    assert verify_module.rederive_workers(folders) == 2  # 2 x 2 x size <= 9 x size / 2
    monkeypatch.setattr(verify_module, "_available_memory", lambda: int(3 * largest))
    assert verify_module.rederive_workers(folders) == 1
    monkeypatch.setattr(verify_module, "_available_memory", lambda: None)
    assert verify_module.rederive_workers(folders) == 1  # not known: one at a time


def test_the_private_key_is_owner_only_and_never_overwritten(lab) -> None:
    assert stat.S_IMODE(lab["key"].stat().st_mode) == 0o600
    again = rig("keys", "new", "--out", str(lab["tmp"] / "lab"))
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert len(again.stderr.strip().splitlines()) <= 2  # one line and its hint


def test_the_broker_s_head_is_compared_with_the_span(lab) -> None:
    lines = (lab["runs"][0].parent / "ledger.jsonl").read_bytes().splitlines()
    digest = hashlib.sha256(lines[-1]).hexdigest()
    code, result = verify(lab["bundle"], "--head", f"{len(lines) - 1}:{digest}")
    assert code == 0
    (check,) = [c for c in result["checks"] if c["item"] == "ledger head from the broker"]
    assert check["ok"] is True
    code, result = verify(lab["bundle"], "--head", f"{len(lines) - 1}:{'0' * 64}")
    assert code == 1 and "ledger head from the broker" in failing(result)


# -- not a bundle ------------------------------------------------------------------------------
def test_not_a_bundle_is_one_line_and_exit_2(lab, tmp_path: Path) -> None:
    junk = tmp_path / "x.zip"
    junk.write_bytes(b"not a zip at all")
    done = rig_in_process("verify", str(junk))
    assert done.returncode == 2 and "is not a bundle" in done.stderr
    assert "Traceback" not in done.stderr  # (in this process, an uncaught error raises here)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("hello.txt", "hi")
    done = rig_in_process("verify", str(empty))
    assert done.returncode == 2 and ENVELOPE in done.stderr


def test_bundle_refuses_a_run_changed_since_it_ended(lab, tmp_path: Path) -> None:
    copy = tmp_path / "runs"
    shutil.copytree(lab["runs"][0].parent, copy)
    run = copy / lab["runs"][0].name
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["summary"]["energy_per_inference_j"] *= 0.5
    (run / "manifest.json").write_text(json.dumps(manifest))
    done = rig("bundle", str(run), "--key", str(lab["key"]), "--out", str(tmp_path / "b.zip"))
    assert done.returncode == 2 and "manifest.json changed since the run ended" in done.stderr
    assert not (tmp_path / "b.zip").exists()


# -- cheats on the bundle as a whole -----------------------------------------------------------
def test_a_file_edited_after_sealing_fails_its_digest(lab, tmp_path: Path) -> None:
    folder = extract(lab["bundle"], tmp_path / "x")
    md = folder / "report" / "report.md"
    md.write_text(md.read_text().replace("45.00", "40.00"))
    out = tmp_path / "edited.zip"
    with zipfile.ZipFile(out, "w") as z:  # the statement as it was: not re-sealed
        for p in sorted(q for q in folder.rglob("*") if q.is_file()):
            z.write(p, p.relative_to(folder).as_posix())
    code, result = verify(out, "--key", str(lab["pub"]))
    assert code == 1 and "file digests" in failing(result)
    (check,) = [c for c in result["checks"] if c["item"] == "file digests"]
    assert "report/report.md: digest differs" in check["detail"]


def test_the_report_edited_before_sealing_differs_from_the_one_made_again(lab, tmp_path) -> None:
    folder = extract(lab["bundle"], tmp_path / "x")
    results = folder / "report" / "results.json"
    data = json.loads(results.read_text())
    show = data["runs"][0]["show"]
    key = next(k for k in ("summary", "figures") if isinstance(show.get(k), dict))
    show[key]["energy_per_inference_j"] = show[key]["energy_per_inference_j"] * 0.9
    results.write_text(json.dumps(data, indent=2))
    code, result = verify(reseal(folder, lab["key"], tmp_path / "r.zip"), "--key",
                          str(lab["pub"]))
    assert code == 1 and failing(result) == {"report regenerated"}
    (check,) = [c for c in result["checks"] if c["item"] == "report regenerated"]
    assert "energy_per_inference_j" in check["detail"]


def test_a_trace_swapped_in_from_another_run_and_signed_with_another_key(lab, tmp_path) -> None:
    folder = extract(lab["bundle"], tmp_path / "x")
    shutil.copy(lab["runs"][1] / "traces" / "emon.jls",
                folder / "runs" / lab["runs"][0].name / "traces" / "emon.jls")
    out = reseal(folder, lab["other"], tmp_path / "s.zip")
    code, result = verify(out, "--key", str(lab["pub"]))
    assert code == 1 and failing(result) == {"signature"}  # nothing else can be trusted
    code, result = verify(out)  # without the lab's key: its own signer.pub holds...
    assert code == 1 and "run in the ledger" in failing(result)  # ...the ledger does not
    (check,) = [c for c in result["checks"]
                if c["item"] == "run in the ledger" and c["ok"] is False]
    assert check["run"] == lab["runs"][0].name and "traces/emon.jls" in check["detail"]


def test_a_trace_scaled_and_resealed_with_the_lab_s_own_key(lab, tmp_path: Path) -> None:
    from rig.traces.files import TraceWriter, read_trace

    folder = extract(lab["bundle"], tmp_path / "x")
    jls = folder / "runs" / lab["runs"][0].name / "traces" / "emon.jls"
    trace = read_trace(jls)
    jls.unlink()
    with TraceWriter(jls, trace.sample_rate, simulated=True) as w:
        w.append(0, (trace.current * 0.9).astype(np.float32),
                 np.asarray(trace.voltage, dtype=np.float32), trace.gpio)
    code, result = verify(reseal(folder, lab["key"], tmp_path / "s.zip"), "--key",
                          str(lab["pub"]))
    assert code == 1
    bad = {(c["run"], c["item"]) for c in result["checks"] if c["ok"] is False}
    assert (lab["runs"][0].name, "run in the ledger") in bad
    # re-derived from the scaled samples, the figures no longer match the manifest's
    assert any(run == lab["runs"][0].name and "energy" in item for run, item in bad), bad


def test_a_ledger_entry_removed_to_hide_a_run_breaks_the_chain(lab, tmp_path: Path) -> None:
    folder = extract(lab["bundle"], tmp_path / "x")
    ledger = folder / "ledger" / "0.jsonl"
    hidden = lab["runs"][1].name
    lines = [line for line in ledger.read_bytes().splitlines()
             if json.loads(line)["run"] != hidden]
    ledger.write_bytes(b"".join(line + b"\n" for line in lines))
    code, result = verify(reseal(folder, lab["key"], tmp_path / "h.zip"), "--key",
                          str(lab["pub"]))
    assert code == 1 and "ledger chain" in failing(result)
    # and an insider who rewrites the whole chain to hide it is caught by the broker's head
    entries = [json.loads(line) for line in lines]
    prev = entries[0]["prev"]
    for n, e in enumerate(entries):
        e["seq"], e["prev"] = entries[0]["seq"] + n, prev
        prev = hashlib.sha256(canonical(e)).hexdigest()
    ledger.write_bytes(b"".join(canonical(e) + b"\n" for e in entries))
    out = reseal(folder, lab["key"], tmp_path / "h2.zip")
    code, result = verify(out, "--key", str(lab["pub"]))
    assert "ledger chain" not in failing(result) and result["left_out"] == []
    # (the second party kept each head the rig published at the end of each run: the one
    # after the hidden run ended now names another entry of the rewritten span)
    real = (lab["runs"][0].parent / "ledger.jsonl").read_bytes().splitlines()
    mid = max(i for i, line in enumerate(real) if json.loads(line)["run"] == hidden)
    code, result = verify(out, "--key", str(lab["pub"]), "--head",
                          f"{mid}:{hashlib.sha256(real[mid]).hexdigest()}")
    assert code == 1 and "ledger head from the broker" in failing(result)


def test_a_qubo_point_with_its_report_verifies(lab, tmp_path: Path) -> None:
    """A `rig measure qubo` point: bundled with its report and verified (its cost evaluated
    again on the regenerated workload, its timeout, the report made again: paths in
    results.json differ between machines and are not compared)."""
    done = rig("measure", "qubo", "--sut", "cpu-sa", "--nodes", "25", "--density", "0.1",
               "--seed", "1", "--timeout", "0.2", "--runs-dir", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert rig("report", str(run), "--out", str(tmp_path / "rep"), "--format",
               "md").returncode == 0
    done = rig_in_process("bundle", str(run), "--report", str(tmp_path / "rep"), "--key",
                          str(lab["key"]), "--out", str(tmp_path / "q.zip"))
    assert done.returncode == 0, done.stderr
    code, result = verify(tmp_path / "q.zip", "--key", str(lab["pub"]))
    assert code == 0, [(c["item"], c["detail"]) for c in result["checks"] if c["ok"] is False]
    items = {c["item"] for c in result["checks"] if c["ok"]}
    assert {"QUBO cost re-evaluated", "QUBO timeout held", "report regenerated"} <= items


def test_runs_re_derived_together_share_the_gil_in_short_turns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While runs are re-derived together, the GIL's switch interval is SWITCH_INTERVAL_S (a
    thread back from pyjls waited up to the 5 ms default behind another run's Python), and
    what it was afterwards, also when a run raised."""
    import sys

    from rig.submission import verify as verify_module

    seen: list[float] = []

    def rederive(folder: Path, labels: dict) -> list:
        seen.append(sys.getswitchinterval())
        if folder.name == "bad":
            raise RuntimeError("a bug in one run")
        return []

    monkeypatch.setattr(verify_module, "_rederive", rederive)
    monkeypatch.setattr(verify_module, "rederive_workers", lambda folders: 2)
    before = sys.getswitchinterval()
    assert verify_module.rederive_runs([tmp_path / "a", tmp_path / "b"], {}) == [[], []]
    assert seen == [verify_module.SWITCH_INTERVAL_S] * 2
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError):
        verify_module.rederive_runs([tmp_path / "a", tmp_path / "bad"], {})
    assert sys.getswitchinterval() == before

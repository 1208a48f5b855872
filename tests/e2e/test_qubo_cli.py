"""`rig qubo generate|bks` through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.qubo import targets, workloads
from rig.qubo.workloads import cost, dense_q, generate


def rig_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_npy_is_the_dense_q(tmp_path: Path, capsys) -> None:
    out = tmp_path / "q.npy"
    data = rig_json(capsys, "qubo", "generate", "--nodes", "100", "--density", "0.05",
                    "--seed", "0", "--out", str(out), "--json")
    w = generate(100, 0.05, 0)
    assert data == {"nodes": 100, "density": 0.05, "seed": 0, "edges": 250, "path": str(out)}
    q = np.load(out)
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q, dense_q(w))


def test_generate_npz_is_the_sparse_graph(tmp_path: Path, capsys) -> None:
    out = tmp_path / "g.npz"
    data = rig_json(capsys, "qubo", "generate", "--nodes", "30000", "--density", "0.0001",
                    "--seed", "2", "--out", str(out), "--json")
    assert data["edges"] == 45000  # int(0.5 * 1e-4 * 30000**2)
    with np.load(out) as f:
        assert set(f.files) == {"edges", "nodes", "density", "seed"}
        assert f["edges"].dtype == np.int32 and f["edges"].shape == (45000, 2)
    assert workloads.load(out) == generate(30000, 0.0001, 2)


def test_generate_human_output(tmp_path: Path, capsys) -> None:
    assert main(["qubo", "generate", "--nodes", "10", "--density", "0.25", "--seed", "1",
                 "--out", str(tmp_path / "q.npz")]) == 0
    assert "12 edges" in capsys.readouterr().out


def test_bks_json_table_exact_and_tabu(capsys) -> None:
    assert rig_json(capsys, "qubo", "bks", "--nodes", "100", "--density", "0.05", "--seed", "0",
                    "--json") == {"cost": -44, "method": "table", "state": None}
    data = rig_json(capsys, "qubo", "bks", "--nodes", "25", "--density", "0.1", "--seed", "3",
                    "--no-table", "--json")
    assert data["method"] == "exact"
    w = generate(25, 0.1, 3)
    x = np.zeros(25, dtype=int)
    x[data["state"]] = 1  # state: the indices of the nodes in the set, ascending
    assert data["state"] == sorted(data["state"])
    assert cost(w, x) == data["cost"] == -len(data["state"])


def test_bks_tabu_for_a_graph_not_in_the_table(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # NeuroBench's 100 reads x 50 restarts take a minute here; the CLI path is what is tested.
    real_tabu = targets.tabu
    monkeypatch.setattr(targets, "tabu", lambda w: real_tabu(w, reads=2, restarts=2))
    data = rig_json(capsys, "qubo", "bks", "--nodes", "60", "--density", "0.25", "--seed", "9",
                    "--json")
    assert data["method"] == "tabu"
    x = np.zeros(60, dtype=int)
    x[data["state"]] = 1
    assert cost(generate(60, 0.25, 9), x) == data["cost"] < 0


@pytest.mark.parametrize(("argv", "message"), [
    (["bks", "--nodes", "10", "--density", "1.5", "--seed", "0"], "density=1.5"),
    (["bks", "--nodes", "-10", "--density", "0.1", "--seed", "0"], "nodes=-10"),
    (["bks", "--nodes", "10", "--density", "0.1", "--seed", "-1"], "seed=-1"),
    (["generate", "--nodes", "0", "--density", "0.1", "--seed", "0", "--out", "{tmp}/q.npz"],
     "nodes=0"),
    (["generate", "--nodes", "25000", "--density", "0.01", "--seed", "0", "--out",
      "{tmp}/q.npy"], ".npz"),
    (["generate", "--nodes", "10", "--density", "0.1", "--seed", "0", "--out", "{tmp}/q.csv"],
     "unknown output format"),
    (["generate", "--nodes", "10", "--density", "0.1", "--seed", "0", "--out",
      "{tmp}/nowhere/q.npz"], "does not exist"),
])
def test_bad_input_exits_2_with_a_message(tmp_path: Path, capsys, argv: list[str],
                                          message: str) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["qubo", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rig: error:") and message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing written


def test_unparsable_numbers_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["qubo", "bks", "--nodes", "ten", "--density", "0.1", "--seed", "0"])
    assert info.value.code == 2


def test_max_size_stops_at_the_limit_and_reports_each_size() -> None:
    import contextlib
    import io

    from rig.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["qubo", "max-size", "--sut", "cpu-sa", "--density", "0.01",
                     "--timeout", "0.2", "--max-nodes", "50", "--json"])
    result = json.loads(out.getvalue())
    assert code == 0
    assert [t["nodes"] for t in result["tried"]] == [10, 25, 50]
    assert all(t["ok"] and t["cost"] < 0 for t in result["tried"])
    assert result["max_nodes"] == 50 and result["stopped_by"] == "max_nodes 50"

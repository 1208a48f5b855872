"""Worker resources and the cluster commands' refusals (no Dask processes: fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.cluster.dispatch import ClusterDispatch
from rig.cluster.resources import (
    HostPowerLock,
    bench_resources,
    parse_resources,
    point_resources,
    worker_threads,
)
from rig.errors import ConfigError

from .runs import REPO, run_rig


def test_resources_from_the_command_line() -> None:
    assert parse_resources("cpu-tabu=1, cpu-sa=1,host-power=1") == {
        "cpu-tabu": 1, "cpu-sa": 1, "host-power": 1}
    assert parse_resources("loihi2") == {"loihi2": 1}
    assert worker_threads({"cpu-tabu": 1, "cpu-sa": 1, "host-power": 1}) == 2
    assert worker_threads({"host-power": 1}) == 1


@pytest.mark.parametrize(("text", "says"), [
    ("cpu_tabu=1", "unknown resource 'cpu_tabu'"),
    ("cpu-tabu=2", "cpu-tabu = 2: expected 1"),
    ("loihi2=one", "expected NAME=1, found count 'one'"),
    ("", "no resources given"),
])
def test_bad_resources_are_refused(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_resources(text)


def test_resources_from_the_shipped_worker_benches() -> None:
    assert bench_resources(REPO / "benches/workers/cpu-baseline.toml") == (
        {"cpu-tabu": 1, "cpu-sa": 1, "host-power": 1}, None)
    assert bench_resources(REPO / "benches/workers/loihi2-host.toml") == ({"loihi2": 1}, None)


def test_bench_without_a_worker_table_says_what_to_add(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no \[worker\] table") as err:
        bench_resources(REPO / "benches/sim.toml")
    assert "--resources" in str(err.value)
    bad = tmp_path / "bad.toml"
    bad.write_text('[worker]\nresources = { xylo = 1 }\nname = "bench-3"\nport = 5\n')
    with pytest.raises(ConfigError, match=r"\[worker\] unknown key 'port'"):
        bench_resources(bad)


def test_a_point_needs_its_sut_and_host_power_when_the_host_reads_its_power() -> None:
    assert point_resources("cpu-sa", {}) == {"cpu-sa": 1, "host-power": 1}  # rapl by default
    assert point_resources("cpu-tabu", {"power_source": "nvml"}) == {
        "cpu-tabu": 1, "host-power": 1}
    assert point_resources("cpu-tabu", {"power_source": "none"}) == {"cpu-tabu": 1}
    assert point_resources("loihi2", {}) == {"loihi2": 1}  # the chip's profiler, not the host


def test_host_power_has_one_owner_per_host(tmp_path: Path) -> None:
    first, second = HostPowerLock(tmp_path / "hp.lock"), HostPowerLock(tmp_path / "hp.lock")
    first.acquire()
    try:
        with pytest.raises(ConfigError, match="already owned by another rig worker"):
            second.acquire()
    finally:
        first.release()
    second.acquire()  # free again once the owner is gone
    second.release()


def test_unreachable_scheduler_is_a_setup_error() -> None:
    with pytest.raises(ConfigError, match="cannot reach the Dask scheduler"):
        ClusterDispatch("tcp://127.0.0.1:9", connect_timeout_s=1.0).connect()
    with pytest.raises(ConfigError, match="expected a scheduler address"):
        ClusterDispatch("127.0.0.1:8786")


@pytest.mark.parametrize(("args", "says"), [
    (["worker", "--scheduler", "tcp://127.0.0.1:9"], "needs --bench FILE or --resources"),
    (["worker", "--scheduler", "tcp://127.0.0.1:9", "--resources", "gpu=1"],
     "unknown resource 'gpu'"),
    (["worker", "--scheduler", "127.0.0.1:9", "--resources", "cpu-sa=1"],
     "expected an address such as tcp://HOST:8786"),
    (["sweep", "qubo", "sweeps/example.toml", "--retries", "2"], "--retries needs --cluster"),
    (["cluster", "local", "--workers", "0"], "--workers 0: expected 1 or more"),
])
def test_cli_refusals_are_one_line(args: list[str], says: str) -> None:
    proc = run_rig(*args, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("rig: error: ") and says in line


class _DeadFuture:
    """What a task's future says after its workers died `allowed-failures` + 1 times."""

    status = "error"

    def exception(self) -> BaseException:
        from types import SimpleNamespace

        from distributed.scheduler import KilledWorker

        return KilledWorker("rig-point-x-3-1", SimpleNamespace(address="tcp://127.0.0.1:1"),
                            allowed_failures=3)


def test_a_point_whose_workers_keep_dying_is_recorded_failed_not_retried() -> None:
    from distributed.scheduler import KilledWorker

    from rig.qubo.sweep import SweepPoint

    point = SweepPoint(3, "cpu-sa", 10, 0.1, 0.05, 0)
    dispatch = ClusterDispatch("tcp://127.0.0.1:8786")
    outcome = dispatch._outcome(_DeadFuture(), point, KilledWorker)
    assert outcome["status"] == "failed" and outcome["retry"] is False
    assert "the 4 workers measuring it all died (the last: tcp://127.0.0.1:1)" in outcome["error"]
    event = dispatch._event(point, outcome, 1, [])
    assert event.status == "failed" and event.key == point.key and event.result == {}

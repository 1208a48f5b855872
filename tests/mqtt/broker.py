"""A real mosquitto broker for the tests: 127.0.0.1 on a free port, a generated passwd file,
the ACL from docs/mqtt/aclfile.example, optional TLS with a generated CA; stopped by pid.

It imports nothing of the rig: benchmarks/mqtt.py, benchmarks/dashboard.py and benchmarks/soak.py
start their brokers with it too."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACL_EXAMPLE = ROOT / "docs" / "mqtt" / "aclfile.example"
#: Users of the test broker and their passwords (rig-a and rig-b are rigs).
USERS = {"rig-a": "rig-a-secret-3141", "rig-b": "rig-b-secret-2718",
         "operator": "op-secret-1618", "viewer": "view-secret-1414"}
START_TIMEOUT_S = 10.0


def mosquitto_binary() -> str | None:
    """The mosquitto executable (Debian puts it in /usr/sbin), or None."""
    return shutil.which("mosquitto") or next(
        (p for p in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.path.exists(p)),
        None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One mosquitto process; `start()`, `stop()`, `restart()` on the same port."""

    def __init__(self, folder: Path, *, tls: bool = False, extra: tuple[str, ...] = (),
                 port: int = 0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.tls = tls
        self.proc: subprocess.Popen | None = None
        self.log = self.folder / "mosquitto.log"
        self.ca_file: Path | None = None
        self.extra = extra
        self._write_config()

    def _write_config(self) -> None:
        passwd = self.folder / "passwd"
        passwd.write_text("")
        for user, password in USERS.items():
            subprocess.run(["mosquitto_passwd", "-b", str(passwd), user, password],
                           check=True, capture_output=True, timeout=20)
        acl = self.folder / "acl"
        acl.write_text(ACL_EXAMPLE.read_text())
        lines = [
            # root would drop to the mosquitto user, who cannot read these files
            "user root",
            "per_listener_settings false",
            "allow_anonymous false",
            f"password_file {passwd}",
            f"acl_file {acl}",
            "persistence false",
            # PUBACKs at once, not held by Nagle (docs/mqtt/mosquitto.conf.example)
            "set_tcp_nodelay true",
            f"log_dest file {self.log}",
            "log_type error warning notice information",
            *self.extra,
            f"listener {self.port} 127.0.0.1",
        ]
        if self.tls:
            ca, cert, key = self._make_certificates()
            lines += [f"cafile {ca}", f"certfile {cert}", f"keyfile {key}"]
        (self.folder / "mosquitto.conf").write_text("\n".join(lines) + "\n")

    def _make_certificates(self) -> tuple[Path, Path, Path]:
        d = self.folder
        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60,
                           cwd=d)
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=neurobench test CA", "-keyout", "ca.key", "-out", "ca.pem")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "broker.key", "-out", "broker.csr")
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        run("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "broker.pem", "-extfile", "san.ext")
        self.ca_file = d / "ca.pem"
        return d / "ca.pem", d / "broker.pem", d / "broker.key"

    def url(self, user: str) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{user}@127.0.0.1:{self.port}"

    def start(self) -> Broker:
        binary = mosquitto_binary()
        assert binary, "mosquitto is not installed (make system-deps installs it)"
        self.proc = subprocess.Popen([binary, "-c", str(self.folder / "mosquitto.conf")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"mosquitto exited: {err} {self._log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mosquitto did not listen on {self.port}: {self._log_tail()}")

    def stop(self) -> None:
        """Stop the broker by its pid (SIGTERM, then SIGKILL); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def kill(self) -> None:
        """The broker dies (SIGKILL by its pid: no clean disconnect for its clients); `start()`
        brings it back on the same port."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        if proc.stderr is not None:  # a broker killed every few minutes: no pipe left open
            proc.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text()[-2000:]
        return ""

"""A real ``relay demo`` process for tests of what a newcomer types: the CLI, the docs' examples.

:class:`Demo` starts ``relay demo`` in its own directory on free ports (inference, control, fake
upstream), waits for its banner and exposes what the banner tells a user: the URLs, the demo relay key
(``relay-data/demo.key``), the admin token (``relay-data/admin.token``) and the environment a user
would have after ``export RELAY_URL=… RELAY_CONTROL_URL=… RELAY_API_KEY=…``. ``cli(...)`` runs the
installed ``relay`` command with that environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

from tests.fixtures.relay_server import RELAY_BIN, free_ports


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}


class Demo:
    def __init__(self, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.port, self.control_port, self.upstream_port = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.control_url = f"http://127.0.0.1:{self.control_port}"
        self.extra_args = extra_args
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._banner_done = threading.Event()

    def start(self, timeout: float = 90) -> Demo:
        env = clean_env() | {"RELAY_PORT": str(self.port), "RELAY_CONTROL_PORT": str(self.control_port)}
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [RELAY_BIN, "demo", "--upstream-port", str(self.upstream_port), *self.extra_args],
            cwd=self.workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        if not self._banner_done.wait(timeout):
            self.stop()
            raise AssertionError("demo banner not printed:\n" + self.text)
        if self.proc.poll() is not None:
            raise AssertionError(f"relay demo exited with {self.proc.returncode}:\n{self.text}")
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if line.strip().startswith("eyJ"):  # the inference token is the banner's last line
                self._banner_done.set()
        self._banner_done.set()

    @property
    def text(self) -> str:
        return "".join(self.output)

    @property
    def key(self) -> str:
        return (self.workdir / "relay-data" / "demo.key").read_text().strip()

    @property
    def token(self) -> str:
        """The demo user's inference token, the banner's last line."""
        return next(line.strip() for line in reversed(self.output) if line.strip().startswith("eyJ"))

    @property
    def admin_token(self) -> str:
        return (self.workdir / "relay-data" / "admin.token").read_text().strip()

    def env(self) -> dict[str, str]:
        return clean_env() | {
            "RELAY_URL": self.url,
            "RELAY_CONTROL_URL": self.control_url,
            "RELAY_API_KEY": self.key,
            "RELAY_ADMIN_TOKEN": self.admin_token,
            "PATH": f"{Path(RELAY_BIN).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY_BIN, *args],
            cwd=self.workdir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

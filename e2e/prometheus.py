"""A real Prometheus (and its promtool) for the monitoring tests: Debian's `prometheus` package,
installed by `make tools`.

`Prometheus` runs the server on a free loopback port with a temporary config and data
directory, scraping every second the targets it is given (job `moldau`) and itself (job
`prometheus`), with the rules files it is given loaded. `start()` returns once every target
has a first sample (about 6 s: Prometheus applies new targets on a 5 s tick), polling its HTTP
API rather than sleeping. `close()` stops it and removes its directory.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from e2e.support import free_port

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
HTTP_TIMEOUT = 10.0
SCRAPE_INTERVAL = "1s"
BROKER_JOB = "moldau"


def tool_path(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed: run `make tools` (Debian package prometheus)"
    return found


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """promtool with its output captured (stdout and stderr together)."""
    return subprocess.run([tool_path("promtool"), *args], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


class Prometheus:
    """`target_labels` gives a target labels of its own, `__meta_*` ones included (as
    Kubernetes service discovery would), which the `relabel_configs` of the broker job then
    turn into series labels."""

    def __init__(self, workdir: Path, targets: list[str],
                 rule_files: list[Path] | None = None, *,
                 target_labels: dict[str, dict[str, str]] | None = None,
                 relabel_configs: list[dict] | None = None) -> None:
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.rule_files = [Path(path).resolve() for path in rule_files or []]
        self.target_labels = target_labels or {}
        self.relabel_configs = relabel_configs or []
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def config(self) -> dict:
        interval = {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL}
        return {
            "global": {**interval, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(path) for path in self.rule_files],
            "scrape_configs": [
                {"job_name": "prometheus", **interval,
                 "static_configs": [{"targets": [self.address]}]},
                {"job_name": BROKER_JOB, **interval,
                 "static_configs": [{"targets": [target],
                                     "labels": self.target_labels.get(target, {})}
                                    for target in self.targets],
                 "relabel_configs": self.relabel_configs},
            ],
        }

    def start(self, timeout: float = START_TIMEOUT) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config()))
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen(
                [tool_path("prometheus"), f"--config.file={config_path}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address={self.address}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        self.wait_for_first_samples(timeout)
        return self

    def wait_for_first_samples(self, timeout: float) -> None:
        """Every target (its own included) has an `up` sample, whether 1 or 0."""
        expected = len(self.targets) + 1
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}\n"
                                     + self.tail())
            with contextlib.suppress(OSError, ValueError):
                if len(self.query("up")) >= expected:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus had no sample of {expected} targets within "
                                     f"{timeout} s\n" + self.tail())
            time.sleep(0.2)

    def api(self, path: str, **params: str) -> object:
        """GET /api/v1/<path>; the `data` of a successful answer."""
        url = f"http://{self.address}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            # A rejected query is a 4xx whose body says why.
            body = json.load(error)
        if body.get("status") != "success":
            raise ValueError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's series: each {"metric": {labels}, "value": [time, "value"]}."""
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        """Pending and firing alerts, each with its labels, annotations and state."""
        return self.api("alerts")["alerts"]

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no prometheus log)"
        return f"--- prometheus log (last {lines} lines):\n" + "\n".join(text[-lines:])

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its config and data."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

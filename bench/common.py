"""What the benchmarks share: process CPU and memory from /proc, how busy the machine is,
the in-memory ceiling server (bench/ceiling.py) as a child process, and medians with
their spread."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
# The servers close a keep-alive connection idle for 5 s (uvicorn's timeout_keep_alive);
# clients let theirs go sooner, or a POST after a pause meets a closed connection.
CLIENT_KEEPALIVE_S = 3.0


def process_cpu_s(pid: int) -> float:
    """CPU seconds a process's threads have run so far, to the nanosecond (schedstat),
    where /proc/PID/stat counts 10 ms ticks: too coarse for one request."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total / 1e9


def process_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise KeyError("VmRSS")


def machine_busy_s() -> float:
    """CPU seconds all cores spent busy so far (everything but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / TICKS


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def spread(samples: Sequence[float], unit: str = "ms", digits: int = 1) -> str:
    """Median and interquartile range, e.g. `12.3 ms (11.9-13.0)`."""
    low, high = percentile(samples, 0.25), percentile(samples, 0.75)
    return f"{statistics.median(samples):.{digits}f} {unit} ({low:.{digits}f}-{high:.{digits}f})"


def print_table(header: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> None:
    """A Markdown table, as the README quotes the figures: a row a figure, a column a run."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, values in rows:
        print(f"| {name} | " + " | ".join(values) + " |")


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited early with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready in {timeout_s:g} s")


@dataclass
class Ceiling:
    """bench/ceiling.py serving `answer` (spacedock's answer to the full bench query)."""

    port: int
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, port: int, answer: dict[str, Any], token: str, directory: Path) -> Ceiling:
        data = directory / "ceiling-data.json"
        data.write_text(json.dumps(answer))
        log = (directory / "ceiling.log").open("ab")
        process = subprocess.Popen(
            [
                *(sys.executable, str(REPO / "bench" / "ceiling.py")),
                *("--port", str(port), "--data", str(data), "--token", token),
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        ceiling = cls(port, process)
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        return ceiling

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

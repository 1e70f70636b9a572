"""The package as `pip install` delivers it: a wheel built from this repo, installed into a
fresh virtualenv with no npm on the PATH, serves a working GraphiQL page offline.

The wheel is built by pip (reusing its cache). The fresh venv gets spacedock from the
wheel alone; its third-party dependencies come from this test run's site-packages
through a .pth line (a path entry only: the repo's editable install is not activated
there, and the test checks that `api` is imported from the fresh venv).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

from api import graphiql
from core.common.secrets import SecretBox
from sim.ports import free_port
from tests.support.server import REPO

ASSET = re.compile(r'(?:src|href)="/graphiql/([^"]+)"')


@pytest.fixture(scope="module", autouse=True)
def graphiql_assets() -> None:
    """The build takes the assets from the pinned npm packages: install them first."""
    if not graphiql.ASSETS.is_dir():
        subprocess.run(["make", "graphiql"], cwd=REPO, check=True, capture_output=True)


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def get(url: str, accept: str = "*/*") -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def test_a_wheel_serves_graphiql_offline_without_npm(tmp_path: Path) -> None:
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        REPO,
        "--no-deps",
        "-q",
        "-w",
        tmp_path / "dist",
        cwd=tmp_path,
    )
    [wheel] = (tmp_path / "dist").glob("spacedock-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    fresh = run(
        venv / "bin" / "python",
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        cwd=tmp_path,
    ).strip()
    Path(fresh, "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "-q",
        "--target",
        fresh,
        wheel,
        cwd=tmp_path,
    )

    python = venv / "bin" / "python"
    where = run(python, "-c", "import api; print(api.__file__)", cwd=tmp_path).strip()
    assert where.startswith(str(venv)), f"api came from {where}, not the wheel"

    port = free_port()
    env = {
        "PATH": str(venv / "bin"),  # no npm, no node: only the venv
        "HOME": str(tmp_path),
        "SPACEDOCK_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'wheel.db'}",
        "SPACEDOCK_SECRET_KEY": SecretBox.generate_key(),
    }
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [python, "-m", "api", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if get(f"{base}/readyz")[0] == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline, "the installed server never became ready"
                time.sleep(0.1)
        status, page = get(f"{base}/graphql", accept="text/html")
        assert status == 200
        assets = ASSET.findall(page.decode())
        assert len(assets) >= 4 and any(a.endswith("graphiql.min.js") for a in assets)
        for asset in assets:
            status, served = get(f"{base}/graphiql/{asset}")
            assert status == 200
            assert served == (graphiql.ASSETS / asset).read_bytes(), f"{asset} differs from npm's"
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()

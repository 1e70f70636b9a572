"""The build step that puts GraphiQL in the wheel, so `pip install` serves it offline.

The pinned npm packages (api/graphiql/package.json, installed by `make graphiql`) stay
the source: the files the page loads, as named by api/templates/graphiql.html, are
copied from api/graphiql/node_modules into the built package, after checking that
node_modules holds exactly the pinned versions. Project metadata is in pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
GRAPHIQL = HERE / "api" / "graphiql"
TEMPLATE = HERE / "api" / "templates" / "graphiql.html"
# Every asset the page loads is served from /graphiql/<path inside node_modules>.
ASSET_REFERENCE = re.compile(r'(?:src|href)="/graphiql/([^"]+)"')


def page_assets() -> list[str]:
    return sorted(set(ASSET_REFERENCE.findall(TEMPLATE.read_text())))


def check_pinned_versions(node_modules: Path) -> None:
    pinned = json.loads((GRAPHIQL / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        manifest = node_modules / name / "package.json"
        if not manifest.is_file():
            raise SystemExit(f"{manifest} is missing: run `make graphiql` before building")
        installed = json.loads(manifest.read_text())["version"]
        if installed != version:
            raise SystemExit(
                f"{name} {installed} is installed but package.json pins {version}: "
                "run `make graphiql` before building"
            )


class BuildWithGraphiql(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install serves api/graphiql/node_modules from the checkout
        node_modules = GRAPHIQL / "node_modules"
        check_pinned_versions(node_modules)
        target = Path(self.build_lib) / "api" / "graphiql" / "node_modules"
        for asset in page_assets():
            destination = target / asset
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(node_modules / asset, destination)


setup(cmdclass={"build_py": BuildWithGraphiql})

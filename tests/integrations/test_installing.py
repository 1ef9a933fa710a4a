"""docs/integrations/installing.md says which versions of the other frameworks are tested:
they are the ones installed in the integrations environment, and the `--no-deps` pins it
names are dev.py's."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integrations

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "integrations" / "installing.md"


def table() -> dict[str, str]:
    """package -> version, from the page's table rows (`| name | `package` | version | ...`)."""
    rows = re.findall(r"^\| [^|]+ \| `([\w.-]+)` \| ([\d.]+) \|", PAGE.read_text(), flags=re.M)
    return dict(rows)


def test_the_table_names_every_framework():
    assert set(table()) == {"trl", "verl", "openrlhf", "openenv-core", "verifiers", "ray"}


def test_the_tested_versions_are_the_installed_ones():
    try:
        importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the integrations environment: python3 dev.py test-integrations")
    installed = {name: importlib.metadata.version(name) for name in table()}
    assert installed == table()


def test_the_no_deps_pins_are_dev_pys():
    spec = importlib.util.spec_from_file_location("forkgym_dev", ROOT / "dev.py")
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    versions = table()
    assert {name: versions[name] for name in dev.INTEGRATIONS_NO_DEPS} == dev.INTEGRATIONS_NO_DEPS
    text = PAGE.read_text()
    for name, version in dev.INTEGRATIONS_NO_DEPS.items():
        assert f"{name}=={version}" in text

"""The distribution installs one import package, ``forkgym``, and at the top level only the
module PrimeIntellect's verifiers imports for forkgym's taskset, ``forkgym_prime``."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("envs", "agents", "verifiers", "store", "services", "integrations")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
         "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )  # fmt: skip
    (path,) = out.glob("forkgym-*.whl")
    return path


@pytest.mark.slow
def test_wheel_holds_only_the_forkgym_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"forkgym", "forkgym_prime.py"}
    for sub in SUBPACKAGES:
        assert f"forkgym/{sub}/__init__.py" in names
    assert "forkgym/verifiers/data/sample_answers.jsonl" in names
    assert (
        "forkgym/envs/data/gsm8k_sample.jsonl" in names
        and "forkgym/envs/sandbox/runner.py" in names
    )
    assert "forkgym/cli/__init__.py" in names
    for sub in SUBPACKAGES:  # every nested package of a sub-package ships too
        for init in (ROOT / sub).rglob("__init__.py"):
            inner = init.relative_to(ROOT / sub).as_posix()
            assert f"forkgym/{sub}/{inner}" in names, inner
    assert "forkgym/store/migrations/env.py" in names
    assert "forkgym/store/migrations/versions/0001_initial.py" in names
    assert not any("/tests/" in n or n.startswith("tests/") for n in names)


@pytest.mark.slow
def test_installed_wheel_imports_as_subpackages_only(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import forkgym.verifiers, forkgym.envs, forkgym.agents, forkgym.store, forkgym.services\n"
        "import forkgym.bench, forkgym.integrations.verl\n"
        "import gymnasium as gym, forkgym.cli\n"
        "gym.make('forkgym/MathDataset-v0').reset(seed=0)\n"
        f"assert forkgym.verifiers.__file__.startswith({str(site)!r}), forkgym.verifiers.__file__\n"
        "for name in ('agents', 'verifiers', 'envs', 'store', 'services', 'integrations'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ImportError:\n"
        "        continue\n"
        "    raise SystemExit(f'top-level {name} is importable')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, timeout=60)


def test_checkout_folders_refuse_top_level_import():
    """From the repository root the folders are visible, but they refuse to be `verifiers`."""
    for sub in SUBPACKAGES:
        proc = subprocess.run(
            [sys.executable, "-c", f"import {sub}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode != 0
        assert f"import forkgym.{sub} instead" in proc.stderr

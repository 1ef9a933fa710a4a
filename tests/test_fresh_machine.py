"""What a new user meets first, on a machine without bubblewrap (issue: the main job once died
at `forkgym model init` because building the tokenizer corpus made the Python tool's env).

bubblewrap is hidden from each process's PATH here, so these tests hold on a machine that has
it installed (CI's) as on one that lacks it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.system import path_without

ROOT = Path(__file__).resolve().parents[1]
ENV = ["-k", "system_prompt=null", "-k", "operations=+", "-k", "solution_style=worked"]


def _hidden_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKGYM_")}
    return {**env, "PATH": path_without("bwrap", tmp_path / "shadow", path), **extra}


def _forkgym(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "forkgym", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_quickstart_builds_a_model_and_trains_without_bubblewrap(tmp_path):
    env = _hidden_env(tmp_path)
    model, warm, run = tmp_path / "model", tmp_path / "warm", tmp_path / "rloo"
    init = ["model", "init", "--out", str(model)]
    sft = ["sft", "--model", str(model), "--env", "Arithmetic-v0", "--tokens", "3000", "--out", str(warm), *ENV]  # fmt: skip
    # the main job's own configuration for one step, its held-out evaluation included
    train = ["train", "--config", "configs/quickstart.yaml", f"model={warm}", f"out={run}", "steps=1", "eval_every=1", "eval_episodes=4", "eval_k=2", "prompts_per_step=2", "k=2", "--no-progress"]  # fmt: skip
    steps = [init, sft, train]
    for args in steps:
        done = _forkgym(env, *args)
        assert done.returncode == 0, (args[:2], done.stderr[-3000:])
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2 and "eval_accuracy" in metrics[-1]


def test_the_python_tool_without_bubblewrap_is_one_line(tmp_path):
    done = _forkgym(_hidden_env(tmp_path), "envs", "show", "PythonTool-v0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install bubblewrap" in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_sandbox_tests_fail_rather_than_skip_where_the_sandbox_is_required(tmp_path):
    test = "tests/envs/test_tool_envs.py::test_python_tool_is_deterministic_across_branches"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    skipped = subprocess.run(cmd, cwd=ROOT, env=_hidden_env(tmp_path), capture_output=True, text=True)  # fmt: skip
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    env = _hidden_env(tmp_path, FORKGYM_REQUIRE_SANDBOX="1")
    failed = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert failed.returncode == 1 and "FORKGYM_REQUIRE_SANDBOX" in failed.stdout, failed.stdout


@pytest.fixture
def open_tmp():
    """A folder every user can enter (pytest's own lie under a root-only one)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        Path(folder).chmod(0o777)
        yield Path(folder)


def _dev(tmp_path: Path, env: dict[str, str], user: list[str]) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    env = {**env, "FORKGYM_VENV": str(venv)}
    env.pop("FORKGYM_SKIP_SYSTEM", None)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    cmd = [*user, python, str(ROOT / "dev.py"), "run"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_dev_py_as_a_user_who_cannot_install_stops_at_once_with_the_command(open_tmp):
    tmp_path = open_tmp
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*nobody, "test", "-r", str(ROOT / "dev.py")]).returncode != 0:
        # e.g. a checkout inside a private (0700) temp folder, as the sandbox tests also meet
        pytest.skip(f"uid 65534 cannot read {ROOT / 'dev.py'}: make its parent directories o+rx")
    done = _dev(tmp_path, _hidden_env(tmp_path), nobody)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) <= 2 and "sudo apt-get install -y bubblewrap" in lines[0], done.stderr
    assert not (tmp_path / "venv").exists()  # it stopped before creating anything


@pytest.mark.skipif(os.geteuid() != 0, reason="dev.py installs system packages only as root")
def test_dev_py_as_root_installs_bubblewrap_with_apt_get(tmp_path):
    """apt-get itself is stood in for by a script that records its arguments and provides a
    ``bwrap``: installing a package for real would change this machine."""
    bin_dir, log = tmp_path / "fake-bin", tmp_path / "apt.log"
    bin_dir.mkdir()
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {log}\nprintf "#!/bin/sh\\n" > {bin_dir}/bwrap\nchmod +x {bin_dir}/bwrap\nexit 0\n')  # fmt: skip
    apt.chmod(0o755)
    env = _hidden_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
    # a deliberately unusable venv path: the run must get past the system step, then stop
    (tmp_path / "venv").write_text("not a directory")
    done = _dev(tmp_path, env, [])
    assert log.read_text().split() == ["install", "-y", "-q", "bubblewrap"]
    assert "+ " in done.stdout and "apt-get install -y -q bubblewrap" in done.stdout

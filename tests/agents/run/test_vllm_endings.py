"""The vLLM backend run as a user runs it: the documented commands with the defaults a user gets
(held-out evaluation included), and every way a run can end (a normal end, an exception in the
step, SIGINT, SIGTERM) leaving no engine process behind and a run folder that says why.

Each command runs as a subprocess carrying a marker in its environment, which every process
it starts inherits; after the command has exited, no process may carry the marker. With the
CPU engine in-process that checks the command itself; ``forkgym eval`` with
``VLLM_ENABLE_V1_MULTIPROCESSING=1`` starts vLLM's engine core as a process of its own, the
case where a missed shutdown leaves an orphan holding memory.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module", autouse=True)
def _needs_vllm():
    pytest.importorskip("vllm", reason="needs vLLM: python3 dev.py test-vllm")


def marked(marker: str) -> list[int]:
    """Processes whose environment carries ``FORKGYM_TEST_MARKER=marker``."""
    needle = f"FORKGYM_TEST_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _as_from_a_terminal() -> None:
    # a command started in the background by a non-interactive shell (`.ci/run &`) inherits
    # SIGINT ignored, and Python then installs no Ctrl-C handler: give the child the
    # disposition a terminal gives it, so the signal tests test forkgym, not the harness
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], marker: str, **env: str) -> subprocess.Popen:
    environ = {**os.environ, "FORKGYM_TEST_MARKER": marker, **env}
    return subprocess.Popen(
        [sys.executable, "-m", "forkgym", *args],
        cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_as_from_a_terminal,
    )  # fmt: skip


def finish(proc: subprocess.Popen, marker: str, timeout: float = 900) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    deadline = time.monotonic() + 30  # a process may take a moment to be reaped
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marked(marker) == [], f"processes left behind: {marked(marker)}\n{err[-2000:]}"
    return proc.returncode, out, err


def ended(run: Path) -> dict:
    return json.loads((run / "ended.json").read_text())


def wait_for(predicate, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


FAST = ["--backend", "vllm", "--no-progress", "backend_kwargs.max_model_len=512"]


def train_args(model: Path, run: Path, *extra: str) -> list[str]:
    return ["train", "--model", str(model), "--env", "Arithmetic-v0", "--out", str(run), *FAST, *extra]  # fmt: skip


# -- the documented commands ------------------------------------------------------------------


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every shell command in docs/ that names ``--backend vllm`` or
    ``--backend openai``, continuation lines joined."""
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
            for command in block.replace("\\\n", " ").splitlines():
                if re.search(r"--backend (vllm|openai)\b", command):
                    found.append((page.name, " ".join(command.split())))
    return found


def test_the_docs_name_the_commands_this_file_runs():
    pages = {page for page, _ in documented_commands()}
    assert pages == {"vllm-cpu.md", "vllm-gpu.md"}, pages


def test_the_documented_cpu_training_command_with_its_defaults_completes(tmp_path, tiny_model_dir):
    """docs/vllm-cpu.md's example, evaluation and all at their defaults, one step instead of
    twenty; the model is the test's (the docs use the quickstart's warm start)."""
    [command] = [c for page, c in documented_commands() if page == "vllm-cpu.md"]
    args = shlex.split(command)
    assert args[:2] == [".venv-vllm/bin/forkgym", "train"], command
    args = args[1:]
    args[args.index("--model") + 1] = str(tiny_model_dir)
    args[args.index("--steps") + 1] = "1"
    args[args.index("--out") + 1] = str(tmp_path / "run")
    marker = secrets.token_hex(8)
    code, _out, err = finish(start([*args, "--no-progress"], marker), marker)
    assert code == 0, err[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    assert [m["step"] for m in metrics] == [0, 1]
    assert "eval_pass@4" in metrics[0] and "eval_accuracy" in metrics[-1]  # the default eval
    assert ended(tmp_path / "run")["status"] == "completed"


def test_the_documented_gpu_commands_need_a_gpu_and_a_hub_model():
    """docs/vllm-gpu.md's commands name a CUDA device and a hub model; they cannot run on a
    CPU machine without a hub. What they ask for is checked instead: every option is one the
    command accepts."""
    from forkgym.agents.run.config import TrainConfig

    commands = [c for page, c in documented_commands() if page == "vllm-gpu.md"]
    assert any(" train " in f" {c} " for c in commands) and any(" eval " in f" {c} " for c in commands)  # fmt: skip
    for command in commands:
        args = shlex.split(command)
        if args[1] == "train":
            overrides = [a for a in args if "=" in a and not a.startswith("-")]
            flags = {a[2:]: b for a, b in itertools.pairwise(args) if a in ("--backend", "--estimator")}  # fmt: skip
            TrainConfig.load(None, overrides, steps=1, **flags)  # every key and value is valid


# -- how a run ends ---------------------------------------------------------------------------


def test_an_exception_in_the_step_is_one_line_and_the_folder_says_why(tmp_path, tiny_model_dir):
    plugin = tmp_path / "boom.py"
    plugin.write_text(
        "from forkgym.agents.advantages.estimators import Estimator, register_estimator\n"
        "@register_estimator('boom')\n"
        "class Boom(Estimator):\n"
        "    def compute(self, g):\n"
        "        raise RuntimeError('boom in the estimator')\n"
    )
    run = tmp_path / "run"
    marker = secrets.token_hex(8)
    args = train_args(tiny_model_dir, run, "--steps", "3", "--estimator", "boom", f"plugins=[{plugin}]", "eval_every=0")  # fmt: skip
    code, _out, err = finish(start(args, marker), marker)
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("forkgym train")]
    assert len(lines) == 1 and "failed: RuntimeError: boom in the estimator" in lines[0], err[
        -2000:
    ]
    assert "Traceback" not in err
    record = ended(run)
    assert record["status"] == "failed" and "boom in the estimator" in record["reason"]
    assert "Traceback" in (run / "error.log").read_text()


@pytest.mark.parametrize(
    ("signum", "code", "status"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_mid_run_shuts_the_engine_down(tmp_path, tiny_model_dir, signum, code, status):
    run = tmp_path / "run"
    marker = secrets.token_hex(8)
    proc = start(train_args(tiny_model_dir, run, "--steps", "200", "eval_every=0"), marker)
    metrics = run / "metrics.jsonl"
    wait_for(lambda: (metrics.exists() and metrics.read_text().strip()) or proc.poll() is not None)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signum)
    got, _, err = finish(proc, marker)
    assert got == code, err[-2000:]
    assert ended(run)["status"] == status


@pytest.mark.parametrize("how", ["completes", "SIGTERM"])
def test_eval_with_an_engine_process_of_its_own_leaves_none_behind(tiny_model_dir, how):
    """``VLLM_ENABLE_V1_MULTIPROCESSING=1``: vLLM's engine core is a child process."""
    marker = secrets.token_hex(8)
    args = ["eval", "--model", str(tiny_model_dir), "--env", "Arithmetic-v0", "--backend", "vllm",
            "--episodes", "400" if how == "SIGTERM" else "8", "--pass-k", "4", "--no-progress"]  # fmt: skip
    proc = start(args, marker, VLLM_ENABLE_V1_MULTIPROCESSING="1")
    if how == "SIGTERM":
        # the engine core is up as a process of its own (the command, then its child)
        wait_for(lambda: len(marked(marker)) >= 2 or proc.poll() is not None)
        time.sleep(5)  # into the evaluation
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGTERM)
    code, out, err = finish(proc, marker)
    if how == "SIGTERM":
        assert code == 143 and "terminated (SIGTERM)" in err, err[-2000:]
    else:
        assert code == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1])["episodes"] == 8


def test_a_pool_of_in_process_cpu_engines_is_refused_at_start(tmp_path, tiny_model_dir):
    """Two in-process CPU engines generating at once abort the process (measured: glibc's
    "malloc_consolidate(): invalid chunk size"); the run refuses before any step instead."""
    run = tmp_path / "run"
    marker = secrets.token_hex(8)
    args = train_args(tiny_model_dir, run, "--steps", "1", "generation_engines=2", "eval_every=0")  # fmt: skip
    code, _, err = finish(start(args, marker), marker)
    assert code == 1, err[-3000:]
    [line] = [line for line in err.splitlines() if line.startswith("forkgym train")]
    assert "generation_engines=2 needs engines that generate at the same time" in line
    assert ended(run)["status"] == "failed" and not (run / "metrics.jsonl").exists()

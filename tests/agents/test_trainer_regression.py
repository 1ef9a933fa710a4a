"""Fixed-seed ``forkgym train`` runs whose metrics were recorded before the learner redesign.

Four short runs cover the trainer's paths: RLOO, GRPO (with a KL term to a reference model
and SAPO's gate) and ReMax (greedy branches, Dr. GRPO's constant normaliser) on 1-digit sums
with dynamic sampling, two PPO epochs and two mini-batches of several micro-batches each; and
RLOO on the multi-turn calculator env. Every metric that is not a wall-clock time must equal
the recorded one.

Exactness needs the same floating-point arithmetic as the machine that recorded the file. The
warm model's weights, themselves the result of 88 SFT steps, are the witness: when their hash
equals the recorded one, every float is compared exactly; on a machine whose arithmetic
differs (another CPU's kernels round differently), counts, statuses and strings are still
compared exactly and floats to a relative 1e-4.

Re-record (only for an intended change of behaviour, saying so in the commit):
``python -m tests.agents.test_trainer_regression --record``.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

GOLDEN = Path(__file__).parent / "data" / "trainer_regression.json"
WALL_CLOCK = ("time/", "tokens_per_s", "group_span_s_mean", "barrier_idle_s")

COMMON: dict[str, Any] = {
    "env": "forkgym/Arithmetic-v0",
    "steps": 3,
    "seed": 11,
    "prompts_per_step": 4,
    "k": 4,
    "max_new_tokens": 12,
    "lr": 1e-3,
    "dynamic_sampling": True,
    "max_resample_rounds": 2,
    "ppo_epochs": 2,
    "minibatches": 2,
    "micro_batch_size": 5,
    "eval_every": 2,
    "eval_episodes": 16,
    "eval_k": 2,
    "checkpoint_every": 0,
    "progress": False,
}
RUNS: dict[str, dict[str, Any]] = {
    "rloo": {"estimator": "rloo"},
    "grpo_kl_sapo": {
        "estimator": "grpo",
        "loss": "sapo",
        "kl_coef": 0.05,
        "reduction": "seq_mean_token_mean",
    },
    "remax": {"estimator": "remax", "k": 3, "reduction": "dr_grpo_constant"},
    "calculator_rloo": {
        "estimator": "rloo",
        "env": "forkgym/Calculator-v0",
        "env_kwargs": {"system_prompt": None, "digits": 1, "terms": 2},
        "dynamic_sampling": False,
        "max_new_tokens": 16,
        "steps": 2,
    },
}


def run_all(model_dir: Path, work: Path, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every run through the ``forkgym train`` command; metrics without wall-clock fields."""
    from typer.testing import CliRunner

    from forkgym.agents.runlog import read_metrics
    from forkgym.cli import app

    out: dict[str, Any] = {}
    for name, overrides in RUNS.items():
        cfg = {**COMMON, "env_kwargs": env_kwargs, **overrides}
        cfg.update(model=str(model_dir), out=str(work / name))
        path = work / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        result = CliRunner().invoke(app, ["train", "--config", str(path), "--no-progress"])
        assert result.exit_code == 0, result.output
        out[name] = [
            {k: v for k, v in m.items() if not k.startswith(WALL_CLOCK)}
            for m in read_metrics(work / name)
        ]
    return out


def weights_hash(model_dir: Path) -> str:
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()


def differences(expected: Any, actual: Any, exact: bool, where: str = "") -> list[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual)):
            if key not in actual or key not in expected:
                out.append(f"{where}/{key}: only in {'recorded' if key in expected else 'new'}")
            else:
                out += differences(expected[key], actual[key], exact, f"{where}/{key}")
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for d in differences(e, a, exact, f"{where}[{i}]")]  # fmt: skip
    floats = isinstance(expected, float) or isinstance(actual, float)
    if floats and not exact and isinstance(expected, (int, float)) and isinstance(actual, (int, float)):  # fmt: skip
        same = math.isclose(expected, actual, rel_tol=1e-4, abs_tol=1e-9)
    else:
        same = expected == actual and type(expected) is type(actual)
    return [] if same else [f"{where}: recorded {expected!r}, now {actual!r}"]


@pytest.mark.slow
def test_metrics_equal_the_recorded_run(tmp_path, warm_model_dir):
    from tests.conftest import WARM_ENV_KWARGS

    golden = json.loads(GOLDEN.read_text())
    exact = golden["warm_model_sha256"] == weights_hash(warm_model_dir)
    now = run_all(warm_model_dir, tmp_path, WARM_ENV_KWARGS)
    problems = differences(golden["runs"], now, exact)
    assert not problems, f"{len(problems)} differences (exact={exact}):\n" + "\n".join(
        problems[:40]
    )


def _record() -> None:  # pragma: no cover - run by hand
    import tempfile

    import torch

    from forkgym.agents.models import init_model
    from forkgym.agents.sft import sft
    from tests.conftest import WARM_ENV_KWARGS

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = init_model(work / "tiny", corpus_seeds=8)
        warm = work / "warm"
        sft(str(tiny), "forkgym/Arithmetic-v0", tokens=16_000, out=warm, batch_size=16, env_kwargs=WARM_ENV_KWARGS)  # fmt: skip
        runs = run_all(warm, work, WARM_ENV_KWARGS)
        GOLDEN.write_text(
            json.dumps(
                {
                    "recorded_with": {
                        "torch": torch.__version__,
                        "cpu": torch.backends.cpu.get_cpu_capability(),
                    },
                    "warm_model_sha256": weights_hash(warm),
                    "runs": runs,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    _record()

"""Fixed-seed ``forkgym train`` runs whose metrics were recorded before the learner redesign.

Four short runs cover the trainer's paths: RLOO, GRPO (with a KL term to a reference model
and SAPO's gate) and ReMax (greedy branches, Dr. GRPO's constant normaliser) on 1-digit sums
with dynamic sampling, two PPO epochs and two mini-batches of several micro-batches each; and
RLOO on the multi-turn calculator env.

Exactness needs the same floating-point arithmetic as the machine that recorded the file, and
rounding differences grow through sampling into another trajectory altogether, so no tolerance
on values can hold elsewhere. The warm model's weights, themselves the result of 88 SFT steps,
are the witness: the file keeps one recording per witness (with the torch version and CPU
capability it was made with).

* Where a recording's witness matches, every metric that is not a wall-clock time must equal
  the recorded one exactly.
* Elsewhere, the runs are made twice and must be identical to each other (the run-to-run
  determinism a seed promises), must have the recorded structure (runs, steps, metric names,
  the fields the configuration alone fixes) and must keep the accounting invariants that hold
  on any CPU (:func:`invariants`: the generation ledger's sums, budgets, counts). The test
  then warns that values were not compared.

Record (``python -m tests.agents.run.test_trainer_regression --record``) replaces every recording:
for an intended change of behaviour, saying why in the commit. ``--record --add`` adds this
machine's recording beside the others, behaviour unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set

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
    # recorded before the held-out partition existed: training and evaluation draw from every
    # task (tests/envs/test_held_out.py and the trainer tests cover the partition)
    "held_out": False,
    # two intra-op threads, as every recording was made: the thread count splits torch's
    # reductions, so it is part of the arithmetic (the suite itself runs with one)
    "threads": 2,
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
    import torch

    out: dict[str, Any] = {}
    work.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()  # the runs set their own; the suite's is restored after
    try:
        _run_each(model_dir, work, env_kwargs, out)
    finally:
        torch.set_num_threads(threads)
    return out


def _run_each(model_dir: Path, work: Path, env_kwargs: dict[str, Any], out: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from forkgym.agents.run.runlog import read_metrics
    from forkgym.cli import app

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


# metric names whose presence depends on the data: the strata the step's groups fall in, and
# everything a step reports only when it kept a group to train on (estimator, loss, update)
DATA_BINS = ("diag/adv/by_", "diag/loss/by_")
TRAINED_ONLY = ("est/", "loss/", "diag/", "grad_norm", "lr", "reduction", "weight_version", "policy_updated", "reward_mean", "accuracy")  # fmt: skip
# fields the configuration alone fixes where they are reported: equal on any CPU
CONFIG_FIELDS = ("step", "lr", "reduction")


def _trained(metrics: dict[str, Any]) -> bool:
    return "est/groups" in metrics


def structure(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs in shape: runs, steps, metric names (data-dependent ones apart) and the
    configuration's own fields."""
    out = []
    if sorted(expected) != sorted(actual):
        return [f"runs: recorded {sorted(expected)}, now {sorted(actual)}"]
    for name, steps in expected.items():
        if len(steps) != len(actual[name]):
            out.append(f"/{name}: recorded {len(steps)} steps, now {len(actual[name])}")
            continue
        for i, (e, a) in enumerate(zip(steps, actual[name], strict=True)):
            both = _trained(e) and _trained(a)
            skip = DATA_BINS if both or i == 0 else DATA_BINS + TRAINED_ONLY
            ek = {k for k in e if not k.startswith(skip)}
            ak = {k for k in a if not k.startswith(skip)}
            out += [f"/{name}[{i}]/{k}: only in {'recorded' if k in ek else 'new'}" for k in sorted(ek ^ ak)]  # fmt: skip
            out += [f"/{name}[{i}]/{k}: recorded {e[k]!r}, now {a[k]!r}" for k in CONFIG_FIELDS if k in e and k in a and e[k] != a[k]]  # fmt: skip
    return out


def invariants(name: str, steps: list[dict[str, Any]]) -> list[str]:
    """The accounting every run keeps whatever its floats: the generation ledger (generated =
    sampled + greedy, sampled = accepted + discarded, trained = accepted, the running total),
    prompts and responses (sampled = accepted + discarded, K responses a prompt), episodes and
    their statuses, and dynamic sampling's rule (kept groups have signal)."""
    cfg = {**COMMON, **RUNS[name]}
    out: list[str] = []
    total = 0

    def check(i: int, ok: bool, what: str) -> None:
        if not ok:
            out.append(f"/{name}[{i}]: {what}")

    for i, m in enumerate(steps):
        check(i, m["step"] == i, "steps run 0, 1, 2, ...")
        if i == 0:
            continue
        total += m["tokens_generated"]
        check(i, m["tokens_generated_total"] == total, "tokens_generated_total is the running sum")
        check(i, m["tokens_generated"] == m["gen/tokens_generated"] == m["gen/tokens_sampled"] + m["gen/greedy_tokens"], "generated = sampled + greedy")  # fmt: skip
        check(
            i, m["tokens_generated_greedy"] == m["gen/greedy_tokens"], "greedy tokens counted once"
        )
        check(i, m["gen/tokens_sampled"] == m["gen/tokens_accepted"] + m["gen/tokens_discarded"], "sampled = accepted + discarded tokens")  # fmt: skip
        check(i, m["tokens_trained"] == m["gen/tokens_accepted"], "trained = accepted tokens")
        check(i, m["gen/prompts_sampled"] == m["gen/prompts_accepted"] + m["gen/prompts_discarded"], "sampled = accepted + discarded prompts")  # fmt: skip
        check(i, m["gen/responses_sampled"] == cfg["k"] * m["gen/prompts_sampled"], "K responses a sampled prompt")  # fmt: skip
        check(i, m["gen/responses_accepted"] == cfg["k"] * m["gen/prompts_accepted"], "K responses an accepted prompt")  # fmt: skip
        check(i, m["episodes"] == m["gen/responses_accepted"], "episodes = accepted responses")
        statuses = sum(v for k, v in m.items() if k.startswith("status/"))
        check(i, statuses == m["episodes"], "every episode has one status")
        check(i, _trained(m) == (m["gen/prompts_accepted"] > 0), "a step trains iff it kept a group")  # fmt: skip
        if _trained(m):
            check(i, m["est/responses"] == m["episodes"], "the estimator sees every episode")
            check(i, m["est/groups"] == m["gen/prompts_accepted"], "a group an accepted prompt")
            check(i, math.isclose(m["accuracy"], m["status/correct"] / m["episodes"], rel_tol=1e-6), "accuracy = correct / episodes")  # fmt: skip
            check(i, m["est/groups_all_equal"] + m["est/groups_with_signal"] == m["est/groups"], "a group has signal or not")  # fmt: skip
        if cfg["dynamic_sampling"]:
            check(i, 1 <= m["gen/rounds"] <= cfg["max_resample_rounds"] + 1, "rounds within the limit")  # fmt: skip
            check(i, m.get("est/groups_all_equal", 0) == 0, "dynamic sampling keeps groups with signal")  # fmt: skip
            check(i, m["gen/prompts_accepted"] <= cfg["prompts_per_step"], "at most the step's prompts kept")  # fmt: skip
        else:
            check(i, m["gen/rounds"] == 1 and m["gen/prompts_sampled"] == cfg["prompts_per_step"], "one round of the step's prompts")  # fmt: skip
    return out


def recording_for(golden: dict[str, Any], witness: str) -> dict[str, Any] | None:
    return next((r for r in golden["recordings"] if r["warm_model_sha256"] == witness), None)


@pytest.mark.slow
def test_metrics_equal_the_recorded_run(tmp_path, warm_model_dir):
    from tests.conftest import WARM_ENV_KWARGS

    golden = json.loads(GOLDEN.read_text())
    recorded = recording_for(golden, weights_hash(warm_model_dir))
    now = run_all(warm_model_dir, tmp_path / "first", WARM_ENV_KWARGS)
    if recorded is not None:
        problems = differences(recorded["runs"], now, exact=True)
        assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:40])
        return
    again = run_all(warm_model_dir, tmp_path / "again", WARM_ENV_KWARGS)
    problems = differences(now, again, exact=True)
    assert not problems, "the same seed ran differently twice:\n" + "\n".join(problems[:40])
    reference = golden["recordings"][0]["runs"]
    problems = structure(reference, now) + [p for n in now for p in invariants(n, now[n])]
    assert not problems, "\n".join(problems[:40])
    machines = [r["recorded_with"] for r in golden["recordings"]]
    warnings.warn(
        f"trainer regression: this machine's arithmetic matches no recording ({machines}); "
        "checked run-to-run identity, structure and invariants, values not compared "
        "(python -m tests.agents.run.test_trainer_regression --record --add records it)",
        stacklevel=1,
    )


def test_the_recorded_runs_keep_the_invariants():
    for recording in json.loads(GOLDEN.read_text())["recordings"]:
        runs = recording["runs"]
        assert sorted(runs) == sorted(RUNS)
        assert [p for name in runs for p in invariants(name, runs[name])] == []
        assert structure(runs, runs) == []


def test_a_deliberate_change_of_behaviour_fails_each_mode():
    """Perturb one recorded field: the exact comparison names it; the structure and invariants
    that other machines check catch a changed ledger, a missing metric and a changed config."""
    runs = json.loads(GOLDEN.read_text())["recordings"][0]["runs"]
    changed = json.loads(json.dumps(runs))
    changed["rloo"][2]["loss/loss"] *= 1 + 1e-9
    assert differences(runs, changed, exact=True) == [
        f"/rloo[2]/loss/loss: recorded {runs['rloo'][2]['loss/loss']!r}, now {changed['rloo'][2]['loss/loss']!r}"
    ]
    ledger = json.loads(json.dumps(runs))
    ledger["remax"][1]["gen/greedy_tokens"] += 1  # greedy tokens left out of the budget
    assert invariants("remax", ledger["remax"])
    missing = json.loads(json.dumps(runs))
    del missing["grpo_kl_sapo"][3]["loss/entropy"]
    assert structure(runs, missing) == ["/grpo_kl_sapo[3]/loss/entropy: only in recorded"]
    lr = json.loads(json.dumps(runs))
    lr["calculator_rloo"][1]["lr"] = 2e-3
    assert structure(runs, lr) == ["/calculator_rloo[1]/lr: recorded 0.001, now 0.002"]


def _record(add: bool) -> None:  # pragma: no cover - run by hand
    import tempfile

    import torch

    from forkgym.agents.models import init_model
    from forkgym.agents.run.sft import sft
    from tests.conftest import WARM_ENV_KWARGS

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tiny = init_model(work / "tiny", corpus_seeds=8)
        warm = work / "warm"
        sft(str(tiny), "forkgym/Arithmetic-v0", tokens=16_000, out=warm, batch_size=16, env_kwargs=WARM_ENV_KWARGS, held_out=False)  # fmt: skip
        witness = weights_hash(warm)
        recording = {
            "recorded_with": {
                "torch": torch.__version__,
                "cpu": torch.backends.cpu.get_cpu_capability(),
            },
            "warm_model_sha256": witness,
            "runs": run_all(warm, work, WARM_ENV_KWARGS),
        }
    recordings = json.loads(GOLDEN.read_text())["recordings"] if add else []
    recordings = [r for r in recordings if r["warm_model_sha256"] != witness] + [recording]
    GOLDEN.write_text(json.dumps({"recordings": recordings}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({len(recordings)} recording(s))")


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] not in (["--record"], ["--record", "--add"]):
        sys.exit(__doc__)
    _record(add="--add" in sys.argv)

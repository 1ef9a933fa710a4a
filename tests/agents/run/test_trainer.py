"""The trainer: repeatable, resumable, honest about infrastructure failures."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3

import pytest
import torch

from forkgym.agents.generation.episode_log import read_outcomes
from forkgym.agents.run.config import ConfigError, TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.agents.run.trainer import Trainer
from tests.agents.premises import SIGNED_REWARDS, HalfPaid

pytestmark = pytest.mark.float_sensitive  # CI runs it again under another CPU kernel set

TIMING = ("time/", "tokens_per_s", "group_span_s_mean", "barrier_idle_s")


def config(tmp_path, model_dir, name, **overrides) -> TrainConfig:
    values = dict(
        model=str(model_dir),
        env="forkgym/Arithmetic-v0",
        env_kwargs={"system_prompt": None, "operations": "+"},
        estimator="rloo",
        steps=3,
        seed=7,
        prompts_per_step=2,
        k=4,
        max_new_tokens=8,
        eval_every=2,
        eval_episodes=4,
        eval_k=2,
        checkpoint_every=2,
        out=str(tmp_path / name),
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in metrics]


def test_same_seed_same_metrics_and_a_resumed_run_matches(tmp_path, tiny_model_dir):
    # a decaying learning rate, fixed to end at step 4, so that the stopped run shares it
    schedule = dict(lr=2e-4, lr_schedule="linear", lr_decay_steps=4, lr_final_ratio=0.5)
    first = Trainer(config(tmp_path, tiny_model_dir, "a", **schedule))
    first.run()
    second = Trainer(config(tmp_path, tiny_model_dir, "b", **schedule))
    second.run()
    a, b = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [m["step"] for m in a] == [0, 1, 2, 3]
    assert comparable(a) == comparable(b)
    assert a[-1]["tokens_trained"] > 0 and a[-1]["weight_version"] == 3
    assert [m["lr"] for m in a[1:]] == pytest.approx([2e-4, 1.75e-4, 1.5e-4])

    # stop after step 2 (the checkpoint), then resume to step 3
    partial = Trainer(config(tmp_path, tiny_model_dir, "c", steps=2, **schedule))
    partial.run()
    resumed = Trainer(config(tmp_path, tiny_model_dir, "c", steps=3, **schedule), resume=True)
    assert resumed.step == 2
    resumed.run()
    assert comparable(read_metrics(tmp_path / "c")) == comparable(a)
    rows = (
        sqlite3.connect(tmp_path / "c" / "metrics.db")
        .execute("select step from metrics order by step")
        .fetchall()
    )
    assert rows == [(0,), (1,), (2,), (3,)]  # the store holds one row per step after a resume


def test_run_directory_holds_config_metrics_and_checkpoints(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir, "d", steps=2, keep_checkpoints=1)
    Trainer(cfg).run()
    run = tmp_path / "d"
    assert TrainConfig.load(run / "config.yaml") == cfg
    metrics = read_metrics(run)
    for key in ("step", "reward_mean", "accuracy", "tokens_generated", "tokens_trained", "status/correct",
                "est/groups_with_signal", "diag/mixed_of_groups", "loss/loss", "loss/clip_frac_high",
                "time/generate", "time/env_and_verify", "time/update", "time/sync", "gen/tokens_sampled",
                "loss/entropy", "time/forward_and_loss", "time/backward", "time/optimizer"):  # fmt: skip
        assert key in metrics[1], key
    assert metrics[1]["loss/entropy"] > 0  # an untrained model is far from deterministic
    assert "eval_accuracy" in metrics[0] and "eval_pass@2" in metrics[2]
    assert metrics[0]["time/eval"] > 0 and "time/eval" not in metrics[1]  # eval steps only
    # each evaluation's per-task outcomes, by the weights' version (for paired comparisons)
    assert sorted(p.name for p in (run / "eval").iterdir()) == ["version_0000000.json", "version_0000002.json"]  # fmt: skip
    last = read_outcomes(run)
    assert last["weight_version"] == 2 and len(last["correct"]) == cfg.eval_episodes
    assert sum(last["correct"]) / cfg.eval_episodes == metrics[2]["eval_accuracy"]
    assert last["task_ids"] and len(set(last["task_seeds"])) == cfg.eval_episodes
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_0000002"]
    state = json.loads((run / "checkpoints" / "step_0000002" / "trainer_state.json").read_text())
    assert state["step"] == 2
    with sqlite3.connect(run / "metrics.db") as con:
        assert con.execute("select count(*) from metrics").fetchone() == (3,)
        assert con.execute("select id from runs").fetchone() == ("d",)


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "remax", "reinforce", "reinforce_ema"])
def test_every_estimator_trains(tmp_path, tiny_model_dir, estimator):
    cfg = config(
        tmp_path,
        tiny_model_dir,
        estimator,
        estimator=estimator,
        steps=1,
        eval_every=0,
        k=2,
    )
    metrics = Trainer(cfg).run()
    assert metrics["tokens_trained"] > 0
    if estimator == "remax":
        assert (
            metrics["tokens_generated_greedy"] > 0
            and metrics["gen/greedy_tokens"] == metrics["tokens_generated_greedy"]
        )


def test_a_kl_penalty_to_the_reference_is_computed_and_reported(tmp_path, tiny_model_dir):
    cfg = config(tmp_path, tiny_model_dir, "kl", steps=1, eval_every=0, kl_coef=0.1)
    trainer = Trainer(cfg)
    # An untrained policy earns no reward, so no advantage moves it away from the reference;
    # move it by hand instead, as if earlier steps had trained it.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    trainer.run()
    last = read_metrics(tmp_path / "kl")[-1]
    assert last["loss/kl"] > 0 and last["tokens_trained"] > 0
    plain = config(tmp_path, tiny_model_dir, "nokl", steps=1, eval_every=0)
    Trainer(plain).run()
    assert "loss/kl" not in read_metrics(tmp_path / "nokl")[-1]  # no reference model is kept


def test_an_unreachable_verifier_service_leaves_everything_out_and_is_counted(
    tmp_path, tiny_model_dir
):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "down",
        steps=1,
        eval_every=0,
        max_new_tokens=4,
        verifier_url=f"http://127.0.0.1:{port}",
    )
    trainer = Trainer(cfg)
    trainer.verifier.retries = 0
    metrics = trainer.run()
    episodes = metrics["episodes"]
    truncated = metrics["truncated_by_tokens"]  # cut by the token budget: graded by the env itself
    assert metrics["status/error"] == episodes - truncated == metrics["infra_failures"]
    assert metrics["est/responses_invalid"] == metrics["infra_failures"]
    assert metrics["gen/responses_infra_failed"] == metrics["infra_failures"]
    # only the truncated (env-graded, valid) episodes can be in the loss
    assert metrics["loss/sequences"] == truncated


def test_a_verifier_timing_out_on_some_items_keeps_them_out_of_baselines_and_loss(
    tmp_path, warm_model_dir
):
    """Fault injection: a verifier that times out on every other call, standing in for a
    real one running into its time limit (which a random tiny model cannot be made to do).
    The warm model ends its answers, so episodes reach the verifier whatever the sampled
    tokens (an untrained one may run every episode to its token budget, ungraded)."""
    from forkgym.verifiers import MathVerifier, Outcome, Status
    from tests.conftest import WARM_ENV_KWARGS

    class EveryOtherTimesOut:
        def __init__(self) -> None:
            self.inner, self.calls = MathVerifier(workers=0), 0

        def verify(self, reference: str, response: str) -> Outcome:
            self.calls += 1
            if self.calls % 2:
                return Outcome(
                    status=Status.TIMEOUT,
                    reward=None,
                    details={"reason": "time_limit"},
                    verifier="math",
                )
            return self.inner.verify(reference, response)

    cfg = config(
        tmp_path, warm_model_dir, "flaky", steps=1, eval_every=0, max_new_tokens=24,
        env_kwargs=WARM_ENV_KWARGS,
    )  # fmt: skip
    verifier = EveryOtherTimesOut()
    trainer = Trainer(cfg, verifier=verifier)
    batch, _ = trainer.collector.collect(0)
    episodes = batch.sampled
    graded = [ep for ep in episodes if not ep.truncated]
    assert len(graded) >= 2, "the warm model should end some answers within 24 tokens"
    timed_out = [ep for ep in graded if ep.outcome.status is Status.TIMEOUT]
    assert timed_out and all(ep.reward is None and not ep.valid for ep in timed_out)
    assert batch.status_counts()[Status.TIMEOUT] == len(timed_out)
    assert torch.isnan(batch.rewards[~batch.valid]).all() and int((~batch.valid).sum()) == len(timed_out)  # fmt: skip
    verifier.calls = 0  # the same step again: the same samples, the same failures
    metrics = trainer.train_step()
    assert metrics["status/timeout"] == metrics["infra_failures"] == len(timed_out)
    valid_tokens = sum(ep.generated_tokens for ep in episodes if ep.valid)
    assert metrics["tokens_trained"] == valid_tokens  # the timed-out episodes are not trained on
    assert metrics["est/responses_invalid"] == len(timed_out)
    shutil.rmtree(tmp_path / "flaky", ignore_errors=True)


# -- the seams ----------------------------------------------------------------------------------


def test_the_trainer_imports_no_generation_backend():
    import subprocess
    import sys

    code = (
        "import sys, forkgym.agents.run.trainer; "
        "print(sorted(m for m in sys.modules if m.endswith('hf_policy') or m.startswith('vllm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_user_estimator_that_declares_a_greedy_branch_gets_one(tmp_path, warm_model_dir):
    from forkgym.agents.advantages.estimators import ESTIMATORS, Estimator
    from tests.conftest import WARM_ENV_KWARGS

    seen = []

    @ESTIMATORS.register("test_half_greedy_gap")
    class HalfGreedyGap(Estimator):
        """Half of ReMax's advantage; it only declares what it needs."""

        needs_greedy = True

        def compute(self, g):
            seen.append((g.greedy.clone(), g.greedy_valid.clone()))
            return 0.5 * (g.r - g.greedy[:, None]), {}

    try:
        cfg = config(
            tmp_path, warm_model_dir, "gap", estimator="test_half_greedy_gap", steps=2,
            eval_every=0, env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12,
        )  # fmt: skip
        trainer = Trainer(cfg, verifier=HalfPaid())  # rewards that differ on any CPU
        assert trainer.algorithm.needs_greedy and trainer.rollouts.greedy
        trainer.run()
    finally:
        del ESTIMATORS["test_half_greedy_gap"]
    metrics = read_metrics(tmp_path / "gap")
    assert len(seen) == 2 and all(g.shape == (cfg.prompts_per_step,) for g, _ in seen)
    assert all(m["tokens_generated_greedy"] > 0 for m in metrics[1:])
    assert metrics[-1]["gen/greedy_responses"] == cfg.prompts_per_step
    assert any(m["est/adv_nonzero"] > 0 for m in metrics[1:])  # the greedy rewards were used


def test_a_separate_generation_model_synced_by_copy_trains_identically(tmp_path, warm_model_dir):
    """The transformers backend on its own copy of the model (weights copied in sync_weights,
    the shape of a separate engine) gives the shared-model run's metrics exactly."""
    from tests.conftest import WARM_ENV_KWARGS

    # the premise (every step updates the weights, so each sync matters) must not depend on
    # what this CPU's rounding makes the model answer: REINFORCE on rewards that are never 0
    env_kwargs = {**WARM_ENV_KWARGS, "rewards": SIGNED_REWARDS}
    common = dict(env_kwargs=env_kwargs, estimator="reinforce", max_new_tokens=12, lr=1e-3, steps=3)
    shared = Trainer(config(tmp_path, warm_model_dir, "shared", **common))
    copied = Trainer(
        config(tmp_path, warm_model_dir, "copy", backend_kwargs={"share_model": False}, **common)
    )
    assert shared.policy.model is shared.model and copied.policy.model is not copied.model
    shared.run()
    copied.run()
    a, b = read_metrics(tmp_path / "shared"), read_metrics(tmp_path / "copy")
    moved = [m["grad_norm"] > 0 and m["est/adv_nonzero"] == m["est/responses"] for m in a[1:]]
    assert all(moved) and a[-1]["weight_version"] == 3, "premise: every step updates the weights"
    # the copy generates with weights of its own, so its drift is measured: the KV-cached
    # decode against the trainer's full forward, float rounding only (~1e-6 here)
    assert "drift/logprob_abs_max" not in a[-1]
    assert all(m["drift/logprob_abs_max"] < 1e-5 for m in b[1:])
    assert all(abs(m["drift/ratio_max"] - 1) < 1e-5 for m in b[1:])
    assert all(m["sync/bytes"] > 0 for m in b[1:])
    extra = ("drift/", "sync/", "time/drift")
    b = [{k: v for k, v in m.items() if not k.startswith(extra)} for m in b]
    a = [{k: v for k, v in m.items() if not k.startswith(extra)} for m in a]
    assert comparable(a) == comparable(b)
    for p, q in zip(copied.model.parameters(), copied.policy.model.parameters(), strict=True):
        assert torch.equal(p, q)  # the last sync left the copy equal to the trained model


def test_per_response_losses_are_stratified_on_request(tmp_path, warm_model_dir):
    from tests.conftest import WARM_ENV_KWARGS

    common = dict(env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, steps=1, eval_every=0)
    Trainer(config(tmp_path, warm_model_dir, "diag", diagnose_losses=True, **common)).run()
    Trainer(config(tmp_path, warm_model_dir, "plain", **common)).run()
    diag, plain = read_metrics(tmp_path / "diag")[-1], read_metrics(tmp_path / "plain")[-1]
    strata = [k for k in diag if k.startswith("diag/loss/by_")]
    assert any("/by_length/" in k for k in strata) and any("/by_group_size/" in k for k in strata)
    assert not [k for k in plain if k.startswith("diag/loss/by_")]
    assert diag["loss/loss"] == plain["loss/loss"]  # the diagnostic changes nothing it measures


def test_a_rollout_correction_anchors_the_ratio_at_the_trainers_own_logprobs(
    tmp_path, warm_model_dir
):
    """With a correction on, the loss's ratio starts at exactly 1 (the trainer's recomputed
    log-probs, the same forward), and the engine's log-probs enter through the weights."""
    from tests.conftest import WARM_ENV_KWARGS

    common = dict(
        env_kwargs=WARM_ENV_KWARGS, max_new_tokens=12, steps=2, eval_every=0,
        backend_kwargs={"share_model": False},
    )  # fmt: skip
    plain = Trainer(config(tmp_path, warm_model_dir, "plain", **common))
    plain.run()
    fixed = Trainer(
        config(tmp_path, warm_model_dir, "tis", rollout_correction=["tis", "geo_mask"], **common)
    )
    fixed.run()
    a, b = read_metrics(tmp_path / "plain"), read_metrics(tmp_path / "tis")
    assert any(m["loss/ratio_max"] != 1.0 for m in a[1:])  # the copy's decode rounds differently
    for m in b[1:]:
        assert m["loss/ratio_min"] == m["loss/ratio_max"] == 1.0
        assert m["correction/tis_clipped_frac"] == 0.0
        assert m["correction/masked_sequences_frac"] == 0.0  # ~1e-6 drift, inside the band
        assert m["drift/logprob_abs_max"] < 1e-5
    no_drift = Trainer(config(tmp_path, warm_model_dir, "off", measure_drift=False, **common))
    assert not no_drift.measure_drift
    # a correction asked for on the shared model is not silently dropped: drift is measured
    shared = config(tmp_path, warm_model_dir, "shared", rollout_correction=["tis"])
    assert Trainer(shared).measure_drift


def test_a_token_budget_ends_the_run_within_one_step_and_survives_a_resume(tmp_path, tiny_model_dir):  # fmt: skip
    budget = dict(steps=50, max_tokens_generated=150, eval_every=0, eval_every_tokens=60,
                  eval_at_start=False, checkpoint_every=1)  # fmt: skip
    Trainer(config(tmp_path, tiny_model_dir, "full", **budget)).run()
    rows = read_metrics(tmp_path / "full")
    totals = [m["tokens_generated_total"] for m in rows]
    assert totals == list(torch.tensor([m["tokens_generated"] for m in rows]).cumsum(0))
    assert totals[-1] >= 150 and totals[-2] < 150  # stopped at the step that reached it
    evaluated = [m["tokens_generated_total"] for m in rows if "eval_accuracy" in m]
    crossings = [
        t for prev, t in zip([0, *totals[:-1]], totals, strict=True) if t // 60 > prev // 60
    ]
    assert evaluated == sorted(set(crossings) | {totals[-1]}) and rows[0]["step"] == 1
    # an interrupted run resumes with its running total
    Trainer(config(tmp_path, tiny_model_dir, "part", **{**budget, "steps": 2})).run()
    Trainer(config(tmp_path, tiny_model_dir, "part", **budget), resume=True).run()
    part = read_metrics(tmp_path / "part")
    assert [m["tokens_generated_total"] for m in part] == totals


def test_the_run_says_when_it_evaluates_and_when_it_trains(tmp_path, tiny_model_dir):
    """A caller can label a long first evaluation (eval_at_start) instead of sitting at step 0."""
    phases: list[tuple[str, int]] = []
    trainer = Trainer(config(tmp_path, tiny_model_dir, "phases", eval_k=0))
    trainer.run(on_phase=lambda phase, step: phases.append((phase, step)))
    assert phases == [("eval", 0), ("train", 0), ("eval", 2), ("train", 2), ("eval", 3)]


def test_an_evaluation_in_chunks_with_progress_matches_one_batch(tiny_model_dir):
    """The CLI's progress bar evaluates chunk by chunk: same tasks, same sampling seeds."""
    import gymnasium as gym

    from forkgym.agents.generation.backends.registry import build_policy
    from forkgym.agents.generation.evaluate import evaluate
    from forkgym.agents.models import load_policy_model

    model, tokenizer = load_policy_model(tiny_model_dir)
    policy = build_policy("hf", model, tokenizer, seed=0)
    kwargs = {"system_prompt": None, "operations": "+", "digits": 1}

    def run(**options):
        return evaluate(
            policy, tokenizer, lambda: gym.make("forkgym/Arithmetic-v0", **kwargs),
            episodes=5, seed=3, k=3, max_new_tokens=6, **options,
        )  # fmt: skip

    told: list[tuple[str, int, int]] = []
    chunked = run(progress=lambda *args: told.append(args), chunk=2)
    assert chunked == run()
    assert told == [("pass@1", 0, 5), ("pass@1", 2, 5), ("pass@1", 4, 5), ("pass@1", 5, 5),
                    ("pass@3", 0, 5), ("pass@3", 2, 5), ("pass@3", 4, 5), ("pass@3", 5, 5)]  # fmt: skip


def test_a_fixed_list_of_eval_tasks_is_what_every_evaluation_scores(tmp_path, tiny_model_dir):
    tasks = [11, 5, 907, 42]
    Trainer(config(tmp_path, tiny_model_dir, "fixed", steps=2, eval_tasks=tasks, eval_episodes=4)).run()  # fmt: skip
    assert read_outcomes(tmp_path / "fixed")["task_seeds"] == tasks
    with pytest.raises(ConfigError, match="eval_tasks"):
        config(tmp_path, tiny_model_dir, "bad", eval_tasks=[1, 2], eval_episodes=4)

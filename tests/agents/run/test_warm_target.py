"""The warm start's learning-rate schedule and its stop at a validation-accuracy target
(agents/run/sft.py, agents/run/warm_target.py)."""

import math

import pytest

from forkgym.agents.learner.schedules import lr_factor
from forkgym.agents.run import warm_target
from forkgym.agents.run.sft import every_steps, sft, sft_lr_factor
from forkgym.agents.run.warm_target import (
    AccuracyTarget,
    accuracy_target,
    content_keys,
    reported_tasks,
    validation_tasks,
)
from forkgym.envs.base import content_split
from tests.conftest import WARM_ENV_KWARGS

ENV = "forkgym/Arithmetic-v0"
# the quickstart's task (configs/quickstart.yaml's env, at the default eval_fraction): 2-digit
# sums with worked answers
QUICKSTART = {"system_prompt": None, "operations": "+", "solution_style": "worked"}


def test_the_constant_schedule_is_what_sft_always_did():
    for step, trained in [(0, 0), (3, 90), (9, 300), (10, 330), (500, 10**6)]:
        assert sft_lr_factor("constant", step, trained, 1000, 10) == lr_factor(
            "constant", step, 1, 10
        )


def test_the_warm_up_ramps_over_steps_whatever_the_schedule():
    assert sft_lr_factor("cosine", 0, 0, 1000, 10) == pytest.approx(0.1)
    assert sft_lr_factor("linear", 4, 500, 1000, 10, 0.2) == pytest.approx(0.5)
    assert sft_lr_factor("cosine", 9, 999, 1000, 10) == pytest.approx(1.0)


@pytest.mark.parametrize("final", [0.0, 0.1])
def test_the_decay_runs_over_tokens_to_the_final_ratio(final):
    def at(schedule, trained):
        return sft_lr_factor(schedule, 50, trained, 1000, 10, final)

    assert at("linear", 0) == pytest.approx(1.0)
    assert at("linear", 250) == pytest.approx(final + (1 - final) * 0.75)
    assert at("cosine", 500) == pytest.approx(final + (1 - final) * 0.5)
    assert at("cosine", 250) == pytest.approx(final + (1 - final) * (1 + math.cos(math.pi / 4)) / 2)  # fmt: skip
    for schedule in ("linear", "cosine"):  # at the end of the decay and past it: the floor
        assert at(schedule, 1000) == pytest.approx(final)
        assert at(schedule, 5000) == pytest.approx(final)
    factors = [at("cosine", t) for t in range(0, 1001, 50)]
    assert factors == sorted(factors, reverse=True)


def test_sft_sets_the_optimizer_to_the_schedule(tiny_model_dir, tmp_path):
    """Each step's rate (logged) is lr times the factor for the step and the tokens trained
    before it; the constant default keeps lr after the warm-up."""
    for schedule, final in [("cosine", 0.1), ("constant", 0.0)]:
        seen = []
        sft(
            str(tiny_model_dir), ENV, tokens=400, out=tmp_path / schedule, batch_size=4, lr=1e-3,
            warmup_steps=2, env_kwargs=WARM_ENV_KWARGS, lr_schedule=schedule,
            lr_final_ratio=final, lr_decay_tokens=200, log=seen.append,
        )  # fmt: skip
        before = [0] + [m["tokens"] for m in seen[:-1]]
        expected = [1e-3 * sft_lr_factor(schedule, i, t, 200, 2, final) for i, t in enumerate(before)]  # fmt: skip
        assert [m["lr"] for m in seen] == pytest.approx(expected)
        assert [m["lr"] for m in seen[:2]] == pytest.approx([5e-4, 1e-3])
        assert seen[-1]["lr"] == pytest.approx(1e-3 if schedule == "constant" else 1e-4)


def test_the_evaluation_kept_clear_of_is_the_one_train_runs(tiny_model_dir):
    """reported_tasks is the stream agents/generation/evaluate.py draws (what train and eval
    evaluate on), and seed i of it does not depend on how many are drawn."""
    import gymnasium as gym

    from forkgym.agents.generation.backends.hf_policy import HFPolicy
    from forkgym.agents.generation.evaluate import evaluate
    from forkgym.agents.models import load_policy_model
    from forkgym.agents.run.config import TrainConfig
    from forkgym.envs.base import on_side

    model, tokenizer = load_policy_model(str(tiny_model_dir))
    record = []
    kwargs = on_side(QUICKSTART, "eval")
    evaluate(HFPolicy(model, tokenizer), tokenizer, lambda: gym.make(ENV, **kwargs), episodes=4,
             seed=TrainConfig.eval_seed, max_new_tokens=2, record=record)  # fmt: skip
    assert [r["task_seed"] for r in record] == reported_tasks(4)
    assert reported_tasks(128) == reported_tasks(200)[:128]


def test_validation_tasks_are_eval_side_and_none_of_the_reported_problems():
    reported = reported_tasks(200)
    tasks = validation_tasks(ENV, QUICKSTART, 200, avoid=reported)
    keys = content_keys(ENV, QUICKSTART, tasks)
    assert len(tasks) == 200 and len(set(keys)) == 200  # distinct problems
    assert set(keys).isdisjoint(content_keys(ENV, QUICKSTART, reported))
    assert all(content_split(key, 0.2) == "eval" for key in keys)  # never demonstrated
    assert tasks == validation_tasks(ENV, QUICKSTART, 200, avoid=reported)  # one fixed list
    other = validation_tasks(ENV, QUICKSTART, 200, avoid=reported_tasks(200, 7), eval_seed=7)
    assert set(content_keys(ENV, QUICKSTART, other)).isdisjoint(
        content_keys(ENV, QUICKSTART, reported_tasks(200, 7))
    )


def test_a_small_task_space_repeats_its_problems_or_is_refused():
    keys = content_keys(ENV, WARM_ENV_KWARGS, validation_tasks(ENV, WARM_ENV_KWARGS, 20, avoid=reported_tasks(3)))  # fmt: skip
    assert len(keys) == 20 and len(set(keys)) < 20
    assert set(keys).isdisjoint(content_keys(ENV, WARM_ENV_KWARGS, reported_tasks(3)))
    with pytest.raises(ValueError, match="every eval-side problem drawn is among"):
        validation_tasks(ENV, WARM_ENV_KWARGS, 20, avoid=reported_tasks(200))


def test_a_reached_target_stops_at_the_first_check(tiny_model_dir, tmp_path):
    target = accuracy_target(0.0, ENV, QUICKSTART, episodes=4, max_new_tokens=4, every=2)
    result = sft(str(tiny_model_dir), ENV, tokens=100_000, out=tmp_path / "w", batch_size=4,
                 env_kwargs=QUICKSTART, until=target)  # fmt: skip
    assert result["steps"] == 2 and result["tokens"] < 100_000
    assert [c["tokens"] for c in target.checks] == [result["tokens"]]
    assert target.summary() == {
        "target_accuracy": 0.0, "validation_accuracy": 0.0, "validation_episodes": 4,
        "validation_checks": 1, "target_reached": True, "restored_tokens": None,
    }  # fmt: skip


def test_an_unreached_target_runs_to_the_cap_and_says_so(tiny_model_dir, tmp_path):
    target = accuracy_target(1.0, ENV, QUICKSTART, episodes=4, max_new_tokens=4, every=2)
    result = sft(str(tiny_model_dir), ENV, tokens=300, out=tmp_path / "w", batch_size=4,
                 env_kwargs=QUICKSTART, until=target)  # fmt: skip
    assert result["tokens"] >= 300
    # checked every 2 steps, and the saved model once more if the last step was not
    assert target.checks[-1]["tokens"] == result["tokens"]
    assert len(target.checks) == math.ceil(result["steps"] / 2)
    assert target.summary()["target_reached"] is False


def test_the_rule_keeps_its_own_cadence_and_watches_each_step_once_near(tiny_model_dir, tmp_path):  # fmt: skip
    # sft asks it every step; far from the target it evaluates every 3rd call and after the last
    far = accuracy_target(1.0, ENV, QUICKSTART, episodes=4, max_new_tokens=4, every=3)
    result = sft(str(tiny_model_dir), ENV, tokens=300, out=tmp_path / "a", batch_size=4,
                 env_kwargs=QUICKSTART, until=far)  # fmt: skip
    steps = result["steps"]
    assert far.calls == steps and far.checks[-1]["tokens"] == result["tokens"]
    assert len(far.checks) == steps // 3 + (steps % 3 > 0)
    # within `near` of the target (here any accuracy is) it evaluates every call after the first
    near = accuracy_target(1.0, ENV, QUICKSTART, episodes=4, max_new_tokens=4, every=3, near=1.0)  # fmt: skip
    sft(str(tiny_model_dir), ENV, tokens=300, out=tmp_path / "b", batch_size=4,
        env_kwargs=QUICKSTART, until=near)  # fmt: skip
    assert near.calls == steps and len(near.checks) == steps - 2


def _scripted(monkeypatch, accuracies, tolerance):
    """A rule whose checks see ``accuracies`` in turn, and a model whose one weight is set
    to the call's number before each call (so a restore is visible in the weight)."""
    import torch

    seen = iter(accuracies)
    monkeypatch.setattr(warm_target, "validation_accuracy", lambda *a: next(seen))
    rule = AccuracyTarget(0.4, ENV, QUICKSTART, [1, 2], 8, tolerance=tolerance)
    model = torch.nn.Linear(1, 1, bias=False)
    stopped_at = None
    for call in range(1, len(accuracies) + 1):
        with torch.no_grad():
            model.weight.fill_(call)
        if rule(model, None, 100 * call):
            stopped_at = call
            break
    return rule, float(model.weight.detach()), stopped_at


def test_an_overshooting_stop_restores_the_checked_model_closest_to_the_target(monkeypatch):
    rule, weight, stopped = _scripted(monkeypatch, [0.1, 0.37, 0.39, 0.36, 0.52], 0.05)
    assert stopped == 5 and weight == 3.0  # the model of the 3rd check (0.39)
    assert rule.checks[-1] == {"tokens": 300, "validation_accuracy": 0.39, "restored": 1.0}
    assert rule.summary() == {
        "target_accuracy": 0.4, "validation_accuracy": 0.39, "validation_episodes": 2,
        "validation_checks": 5, "target_reached": True, "restored_tokens": 300,
    }  # fmt: skip


def test_a_stop_within_the_tolerance_or_with_nothing_close_keeps_the_last_model(monkeypatch):
    # 0.44 is within 0.05 of the target: kept, though 0.39 was closer
    rule, weight, _ = _scripted(monkeypatch, [0.39, 0.44], 0.05)
    assert weight == 2.0 and rule.summary()["restored_tokens"] is None
    # no checked model came within 0.05: the overshoot stands
    rule, weight, _ = _scripted(monkeypatch, [0.2, 0.3, 0.6], 0.05)
    assert weight == 3.0 and rule.summary()["validation_accuracy"] == 0.6
    # tolerance 0 (the default): never restores
    rule, weight, _ = _scripted(monkeypatch, [0.39, 0.9], 0.0)
    assert weight == 2.0


def test_once_near_the_target_every_later_call_evaluates_even_after_a_fall(monkeypatch):
    seen = iter([0.35, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    monkeypatch.setattr(warm_target, "validation_accuracy", lambda *a: next(seen))
    rule = AccuracyTarget(0.4, ENV, QUICKSTART, [1], 8, every=3, near=0.1)
    for call in range(1, 10):
        rule(None, None, 10 * call)
    # calls 1-2 are not due; call 3 finds 0.35, within 0.1 of 0.4; calls 4-9 all evaluate
    assert [c["tokens"] for c in rule.checks] == [30, 40, 50, 60, 70, 80, 90]


def test_a_target_outside_0_1_is_refused():
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        accuracy_target(1.01, ENV, QUICKSTART)
    with pytest.raises(ValueError, match="every must be >= 1"):
        accuracy_target(0.5, ENV, QUICKSTART, every=0)


def test_a_plain_check_every_n_steps_is_asked_at_each_nth_step_and_after_the_last(tiny_model_dir, tmp_path):  # fmt: skip
    seen = []

    def check(model, tokenizer, tokens):
        seen.append(tokens)
        return False

    result = sft(str(tiny_model_dir), ENV, tokens=300, out=tmp_path / "w", batch_size=4,
                 env_kwargs=QUICKSTART, until=every_steps(check, 3))  # fmt: skip
    steps = result["steps"]
    assert steps % 3 != 0  # the last step is off the cadence, and is asked all the same
    assert len(seen) == steps // 3 + 1 and seen[-1] == result["tokens"]
    with pytest.raises(ValueError, match="n >= 1"):
        every_steps(check, 0)

"""``forkgym eval --run DIR``: a run's checkpoint evaluated with the run's own settings; explicit
options override them; one-line errors for a folder that is not a run; a progress bar."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from forkgym.agents.run.config import TrainConfig
from forkgym.agents.run.runlog import read_metrics
from forkgym.cli import app
from forkgym.cli.train import phase_label

runner = CliRunner()


def said(result) -> str:
    """The output as one line: rich's box and wrapping removed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


def last_json(result) -> dict:
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, warm_model_dir):
    """Two steps of RLOO on 1-digit sums, evaluated (pass@1 and pass@2) at the end, with
    settings that differ from eval's defaults (env kwargs, token budget, seed, episodes)."""
    run = tmp_path_factory.mktemp("eval-run") / "run"
    args = ["train", "--model", str(warm_model_dir), "--env", "Arithmetic-v0", "--steps", "2",
            "--out", str(run), "--no-progress", "env_kwargs.system_prompt=null",
            "env_kwargs.operations=+", "env_kwargs.digits=1", "env_kwargs.solution_style=compact",
            "env_kwargs.instruction=false", "prompts_per_step=2", "k=2", "max_new_tokens=7",
            "eval_every=2", "eval_at_start=false", "eval_episodes=3", "eval_k=2",
            "eval_seed=77"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return run


def test_eval_run_repeats_the_runs_own_held_out_evaluation(run_dir):
    logged = read_metrics(run_dir)[-1]
    result = runner.invoke(app, ["eval", "--run", str(run_dir), "--no-progress"])
    assert result.exit_code == 0, result.output
    out = last_json(result)
    assert out["model"] == str(run_dir / "checkpoints" / "step_0000002")
    assert out["env"] == "forkgym/Arithmetic-v0" and out["run"] == str(run_dir)
    assert out["episodes"] == 3 and out["max_new_tokens"] == 7
    # the same checkpoint, tasks, prompts, budget and sampling seeds as the run's last evaluation
    assert out["accuracy"] == logged["eval_accuracy"]
    assert out["eval_pass@2"] == logged["eval_pass@2"]
    assert out["eval_tokens"] == logged["eval_tokens"]


def test_explicit_options_override_the_runs_settings(run_dir, warm_model_dir):
    result = runner.invoke(app, ["eval", "--run", str(run_dir), "--no-progress", "--episodes", "2",
                                 "--max-new-tokens", "3", "--pass-k", "0", "--model",
                                 str(warm_model_dir), "-k", "digits=2"])  # fmt: skip
    assert result.exit_code == 0, result.output
    out = last_json(result)
    assert out["model"] == str(warm_model_dir)
    assert out["episodes"] == 2 and out["max_new_tokens"] == 3
    assert not any(key.startswith("eval_pass@") for key in out)
    # 2-digit sums in a 3-token budget: every answer is cut off
    assert out["accuracy"] == 0.0


def test_eval_shows_a_progress_bar_on_stderr_and_the_same_result(run_dir):
    quiet = last_json(runner.invoke(app, ["eval", "--run", str(run_dir), "--no-progress"]))
    result = runner.invoke(app, ["eval", "--run", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "evaluating pass@1" in result.stderr and "3/3 episodes" in result.stderr
    assert "pass@1" not in result.stdout.strip().splitlines()[-1].split('"eval_')[0]
    assert last_json(result) == quiet


def test_eval_defaults_agree_with_train(warm_model_dir):
    result = runner.invoke(app, ["eval", "--model", str(warm_model_dir), "--env", "Arithmetic-v0",
                                 "--episodes", "1", "--no-progress", "-k", "system_prompt=null"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert last_json(result)["max_new_tokens"] == TrainConfig().max_new_tokens


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp, run: tmp / "nowhere", "nowhere is not a directory"),
        (lambda tmp, run: tmp, "is not a run folder (no config.yaml)"),
        (
            lambda tmp, run: shutil.copy(run / "config.yaml", tmp) and tmp,
            "has no checkpoint yet (checkpoints/step_*)",
        ),
    ],
)
def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, run_dir, make, message):
    result = runner.invoke(app, ["eval", "--run", str(make(tmp_path, run_dir)), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert message in said(result) and "Traceback" not in result.output


def test_eval_without_run_needs_model_and_env(tiny_model_dir):
    result = runner.invoke(app, ["eval", "--model", str(tiny_model_dir)])
    assert result.exit_code == 2
    assert "give --model and --env, or --run DIR" in said(result)


def test_the_train_bar_says_when_it_evaluates():
    config = TrainConfig(eval_episodes=200, eval_k=4, progress=False)
    assert phase_label(config, "eval") == "evaluating (held-out, 200 episodes, pass@4)"
    config.eval_k = 0
    assert phase_label(config, "eval") == "evaluating (held-out, 200 episodes)"
    assert phase_label(config, "train") == "training"

"""The training commands end to end on the tiny model (a few steps each)."""

import json

import pytest
from typer.testing import CliRunner

from forkgym.cli import app

runner = CliRunner()
ENV = ["-k", "system_prompt=null", "-k", "operations=+"]


def test_model_init_sft_train_eval_runs(tmp_path):
    model = tmp_path / "model"
    result = runner.invoke(app, ["model", "init", "--out", str(model)])
    assert result.exit_code == 0, result.stdout
    assert (model / "config.json").exists() and (model / "tokenizer.json").exists()

    warm = tmp_path / "warm"
    result = runner.invoke(
        app,
        [
            "sft",
            "--model",
            str(model),
            "--env",
            "Arithmetic-v0",
            "--tokens",
            "600",
            "--out",
            str(warm),
            "--batch-size",
            "8",
            *ENV,
        ],
    )
    assert result.exit_code == 0, result.stdout
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["tokens"] >= 600 and (warm / "model.safetensors").exists()

    run = tmp_path / "run"
    args = ["train", "--model", str(warm), "--env", "Arithmetic-v0", "--estimator", "rloo", "--steps", "2", "--seed", "3", "--out", str(run), "--no-progress",
            "env_kwargs.system_prompt=null", "env_kwargs.operations=+", "prompts_per_step=2", "k=2", "max_new_tokens=6", "eval_every=2", "eval_episodes=3", "eval_k=0"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stdout
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]
    for key in ("reward_mean", "tokens_generated", "tokens_trained"):
        assert key in lines[1]
    assert "eval_accuracy" in lines[2] and (run / "config.yaml").exists()
    assert (run / "checkpoints" / "step_0000002" / "model.safetensors").exists()

    result = runner.invoke(app, ["train", "--out", str(run), "--model", str(warm), "--env", "Arithmetic-v0", "--steps", "3", "--resume", "--no-progress",
                                 "env_kwargs.system_prompt=null", "env_kwargs.operations=+", "prompts_per_step=2", "k=2", "max_new_tokens=6", "eval_every=0"])  # fmt: skip
    assert result.exit_code == 0, result.stdout
    assert [
        json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
    ] == [0, 1, 2, 3]

    result = runner.invoke(
        app,
        [
            "eval",
            "--model",
            str(warm),
            "--env",
            "Arithmetic-v0",
            "--episodes",
            "4",
            "--seed",
            "1",
            "--max-new-tokens",
            "6",
            *ENV,
        ],
    )
    assert result.exit_code == 0, result.stdout
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and 0.0 <= summary["accuracy"] <= 1.0

    listed = runner.invoke(app, ["runs", "list", str(tmp_path)]).stdout
    assert "│ run " in listed and "rloo" in listed and "forkgym/Arithmetic-v0" in listed
    shown = runner.invoke(app, ["runs", "show", str(run)], terminal_width=200)
    assert shown.exit_code == 0 and "evaluations" in shown.stdout
    png = tmp_path / "curve.png"
    assert runner.invoke(app, ["runs", "plot", str(run), "--out", str(png)]).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_rejects_bad_config_keys(tmp_path):
    result = runner.invoke(app, ["train", "--out", str(tmp_path / "x"), "stepz=3"])
    assert result.exit_code == 2 and "unknown config key" in result.stdout + str(result.output)


def test_train_reaches_every_part_from_the_command_line(tmp_path, warm_model_dir):
    """PPO with a critic, a separate generation copy, DAPO's overlong handling and KL in the
    reward: all from --algorithm and key=value overrides."""
    run = tmp_path / "ppo"
    args = ["train", "--model", str(warm_model_dir), "--env", "Arithmetic-v0", "--algorithm", "ppo",
            "--steps", "1", "--out", str(run), "--no-progress", "env_kwargs.system_prompt=null",
            "env_kwargs.operations=+", "env_kwargs.digits=1", "prompts_per_step=2", "k=2",
            "max_new_tokens=8", "eval_every=0", "algorithm_kwargs.lam=0.9",
            "backend_kwargs.share_model=false", "overlong_buffer=4", "mask_truncated=true",
            "kl_coef=0.01", "kl_in_reward=true"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("critic/value_loss", "shaping/overlong_penalty_mean", "shaping/kl_penalty_mean"):
        assert key in last, key
    bad = runner.invoke(app, ["train", "--out", str(tmp_path / "x"), "--algorithm", "a2c"])
    assert bad.exit_code == 2 and "algorithm='a2c' is not one of" in bad.output


def test_a_failing_run_closes_its_log_as_failed():
    """W&B (and the metrics file) are finished, marked failed, before the error goes on."""
    from types import SimpleNamespace

    from forkgym.cli.train import _run_with_progress

    closed: list[int] = []
    phases: list[str] = []

    def run(on_step, on_phase):
        on_phase("eval", 0)
        phases.append("eval")
        raise KeyboardInterrupt

    trainer = SimpleNamespace(
        config=SimpleNamespace(steps=3, eval_episodes=5, eval_k=0),
        step=0,
        run=run,
        log=SimpleNamespace(close=lambda exit_code=0: closed.append(exit_code)),
    )
    with pytest.raises(KeyboardInterrupt):
        _run_with_progress(trainer, show=False)
    assert phases == ["eval"] and closed == [1]


def test_train_help_takes_the_config_docs_and_the_registered_names():
    """The options that set a config key say what its field's help says, and --algorithm,
    --estimator and --backend name what is registered (plugins included)."""
    from forkgym.agents.advantages.base import ALGORITHMS
    from forkgym.agents.advantages.estimators import ESTIMATORS
    from forkgym.agents.run.config import field_help
    from forkgym.cli.train import CONFIG_OPTIONS, config_option_help

    for key in CONFIG_OPTIONS:
        assert field_help(key)[1:] in config_option_help(key), key
    for name in ALGORITHMS:
        assert f"`{name}`" in config_option_help("algorithm")
    for name in ESTIMATORS:
        assert f"`{name}`" in config_option_help("estimator")
    backends = config_option_help("backend")
    assert "`vllm`" in backends and "`openai`" not in backends.split("Registered:")[1]
    out = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "300"}).stdout
    assert "Monte Carlo values from forks" in out and "critic_free, gigpo, ppo, raft, vine" in out


NEWER_LOSSES = [("cispo", "weight_clip_frac"), ("gmpo", "seq_ratio_mean"),
                ("clip_cov", "cov_selected_frac"), ("kl_cov", "cov_selected_frac")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("loss,metric", NEWER_LOSSES)
def test_train_runs_each_newer_loss_and_logs_its_metrics(tmp_path, warm_model_dir, loss, metric):
    """`forkgym train --loss NAME` runs 3 steps on the tiny model; each step logs the loss's own
    metric (CISPO: weights clipped; GMPO: the geometric-mean ratio; Clip-Cov and KL-Cov: the
    fraction of tokens selected by covariance)."""
    run = tmp_path / loss
    args = ["train", "--model", str(warm_model_dir), "--env", "Arithmetic-v0", "--loss", loss,
            "--steps", "3", "--out", str(run), "--no-progress", "env_kwargs.system_prompt=null",
            "env_kwargs.operations=+", "env_kwargs.digits=1", "prompts_per_step=4", "k=4",
            "max_new_tokens=8", "eval_every=0", "ppo_epochs=2"]  # fmt: skip
    if loss.endswith("_cov"):
        args.append("loss_kwargs.fraction=0.05")
    if loss == "clip_cov":  # a band every unclipped token is in, so that some are drawn
        args += ["loss_kwargs.cov_low=-100", "loss_kwargs.cov_high=100"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if f"loss/{metric}" in r]
    assert len(steps) == 3
    if loss.endswith("_cov"):  # at least one token of each micro-batch is selected
        assert all(r[f"loss/{metric}"] > 0 for r in steps)


def test_a_missing_config_file_and_a_model_that_is_a_file_are_one_line_errors(tmp_path):
    """Issue 48: a missing --config printed a 61-line traceback, and a --model naming a file
    (config.json itself) 151 lines ending in the hub's "Repo id must be in the form"."""
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text("{}")
    cases = [
        (["train", "--config", str(tmp_path / "nothere.yaml")], "does not exist"),
        (["train", "--model", str(config), "--out", str(tmp_path / "r")], "is a file"),
        (["eval", "--model", str(config), "--env", "Arithmetic-v0"], "is a file"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output

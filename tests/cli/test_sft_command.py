"""``forkgym sft`` with a validation-accuracy target and a decaying learning rate, end to
end on the tiny model (a few steps each)."""

import json

import pytest
from typer.testing import CliRunner

from forkgym.cli import app

runner = CliRunner()
ENV = ["--env", "Arithmetic-v0", "-k", "system_prompt=null", "-k", "operations=+"]
SMALL = ["--batch-size", "4", "--validation-episodes", "4", "--max-new-tokens", "4"]


def _sft(model, out, *args):
    return runner.invoke(app, ["sft", "--model", str(model), "--out", str(out), *ENV, *SMALL, *args])  # fmt: skip


def test_a_reached_target_stops_early_and_says_so(tiny_model_dir, tmp_path):
    args = ["--tokens", "100000", "--target-accuracy", "0", "--check-every", "2", "--lr-schedule", "cosine", "--lr", "1e-3"]  # fmt: skip
    result = _sft(tiny_model_dir, tmp_path / "warm", *args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["tokens"] < 100_000
    assert summary["target_reached"] is True and summary["validation_checks"] == 1
    assert summary["target_accuracy"] == 0.0 and summary["validation_accuracy"] == 0.0
    assert summary["validation_episodes"] == 4
    assert "validation accuracy 0.000" in result.stderr  # each check is shown
    assert (tmp_path / "warm" / "model.safetensors").exists()


def test_the_cap_ends_an_unreached_target_with_an_error(tiny_model_dir, tmp_path):
    args = ["--tokens", "300", "--target-accuracy", "1", "--check-every", "2", "--lr-schedule", "linear", "--lr-final-ratio", "0.1"]  # fmt: skip
    result = _sft(tiny_model_dir, tmp_path / "warm", *args)
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["target_reached"] is False and summary["tokens"] >= 300
    assert "short of --target-accuracy 1.0" in result.stderr
    assert "--tokens cap (300)" in result.stderr
    assert (tmp_path / "warm" / "model.safetensors").exists()  # the capped model is kept


def test_without_a_target_the_summary_is_as_before(tiny_model_dir, tmp_path):
    result = _sft(tiny_model_dir, tmp_path / "warm", "--tokens", "200")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) == {"out", "steps", "tokens", "final_loss", "seconds", "loss_is_finite"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-accuracy", "1.5"], "--target-accuracy"),
        (["--target-accuracy", "-0.1"], "--target-accuracy"),
        (["--lr-schedule", "step"], "'step' is not one of ['constant', 'cosine', 'linear']"),
        (["--lr-final-ratio", "2"], "--lr-final-ratio"),
        (["--target-accuracy", "0.5", "--all-tasks"], "which --all-tasks demonstrates"),
        (["--target-accuracy", "0.5", "-k", "digitz=1"], "digitz"),
    ],
)
def test_bad_options_are_usage_errors(tiny_model_dir, tmp_path, args, message):
    result = _sft(tiny_model_dir, tmp_path / "warm", "--tokens", "100", *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "warm").exists()

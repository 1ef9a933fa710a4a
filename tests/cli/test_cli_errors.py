"""Mistakes get one clear error and leave nothing behind (reproducers from the integrations
issue: each once printed a long traceback, wrote an empty folder or exited 0)."""

import re

import pytest
from typer.testing import CliRunner

from forkgym.cli import app

runner = CliRunner()


def said(result) -> str:
    """The output as one line: rich's box and wrapping removed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--model", "/missing/dir", "--out", "r"], "no model at /missing/dir"),
        (
            ["train", "--out", "r"],
            "no --model given, and the default runs/tiny-model does not exist",
        ),
        (
            ["train", "--model", "WARM", "--env", "Arithmetc-v0", "--out", "r"],
            "unknown environment 'forkgym/Arithmetc-v0'",
        ),
        (
            ["train", "--model", "WARM", "--out", "r", "env_kwargs.digitz=1"],
            "unexpected keyword argument 'digitz'",
        ),
        (["eval", "--model", "/missing/x", "--env", "Arithmetic-v0"], "no model at /missing/x"),
        (
            ["eval", "--model", "WARM", "--env", "Arithmetic-v0", "-k", "digitz=1"],
            "its keyword arguments: ",
        ),
        (["runs", "plot", "nope", "--out", "x.png"], "nope is not a run directory"),
        (["runs", "list", "nonexistent"], "nonexistent is not a directory"),
    ],
)
def test_one_line_errors_and_no_leftovers(here, tiny_model_dir, args, message):
    args = [str(tiny_model_dir) if a == "WARM" else a for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in said(result) and "Traceback" not in result.output
    assert not (here / "r").exists() and not (here / "x.png").exists()


def test_a_kwarg_error_lists_the_valid_ones_without_a_qualified_name(here, tiny_model_dir):
    result = runner.invoke(app, ["train", "--model", str(tiny_model_dir), "--out", "r", "env_kwargs.digitz=1"])  # fmt: skip
    text = said(result)
    assert "digits" in text and "solution_style" in text and "TextEnv.__init__" not in text


def test_tensorboard_without_its_package_says_how_to_install(here, tiny_model_dir):
    try:
        import torch.utils.tensorboard  # noqa: F401

        pytest.skip("tensorboard is installed here")
    except ImportError:
        pass
    result = runner.invoke(app, ["train", "--model", str(tiny_model_dir), "--out", "r", "tensorboard=true"])  # fmt: skip
    assert result.exit_code == 2 and "pip install tensorboard" in said(result)
    assert not (here / "r").exists()


def test_wandb_without_its_package_says_how_to_install(here, tiny_model_dir):
    """Refused before the run folder is made, as tensorboard is."""
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    result = runner.invoke(app, ["train", "--model", str(tiny_model_dir), "--out", "r", "wandb=true"])  # fmt: skip
    assert result.exit_code == 2 and "pip install 'forkgym[wandb]'" in said(result)
    assert not (here / "r").exists()


def test_outcomes_on_a_missing_database_creates_nothing(here):
    result = runner.invoke(app, ["outcomes", "--db", "sqlite:///missing.db"])
    assert result.exit_code == 2 and "no outcome store" in result.output
    assert not (here / "missing.db").exists()

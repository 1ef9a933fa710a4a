"""`forkgym launch` without the ray extra, and its layout checks (the launch itself is tested
with Ray in tests/integrations/test_ray.py)."""

import importlib.util

import pytest
from typer.testing import CliRunner

from forkgym.cli import app

runner = CliRunner()


def test_launch_lists_its_layout_options():
    out = runner.invoke(app, ["launch", "--help"], env={"COLUMNS": "240"}).stdout
    for option in ("--learners", "--generation-workers", "--verifier-replicas",
                   "--verifier-processes", "--db", "--address", "--resume"):  # fmt: skip
        assert option in out


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="ray is installed")
def test_without_ray_the_command_says_which_extra_to_install():
    result = runner.invoke(app, ["launch", "--steps", "1"], terminal_width=200)
    assert result.exit_code == 2
    assert "forkgym[ray]" in result.output


@pytest.mark.integrations
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs forkgym[ray]")
def test_several_replicas_on_sqlite_are_refused_before_anything_starts():
    result = runner.invoke(app, ["launch", "--verifier-replicas", "2"], terminal_width=200)
    assert result.exit_code == 2 and "shared database" in result.output

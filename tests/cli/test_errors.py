"""A bad database URL or config key is one short error, in a real process (reproducers from
issue 26: `serve --db foo://x` printed a 45-line uvicorn traceback, `outcomes` with an unknown
dialect or an unreachable PostgreSQL up to 415 lines, an unknown config key 17 lines listing
every key)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def forkgym(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120", "FORKGYM_DATA_DIR": str(cwd / "data")}
    return subprocess.run(
        [sys.executable, "-m", "forkgym", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


BAD_URLS = {
    "dialect": ("foo://x", "unknown database dialect 'foo'"),
    "unreachable": (
        f"postgresql+psycopg://forkgym:secret@127.0.0.1:{closed_port()}/db",
        "cannot reach the database at postgresql+psycopg://forkgym:***@127.0.0.1:",
    ),
    "path": ("sqlite:////etc/hostname/store.db", "/etc/hostname is not a directory"),
    "not a url": ("nothing-like-a-url", "is not a database URL"),
}
COMMANDS = {
    "serve": ["serve", "--port", "0", "--workers", "1"],
    "outcomes": ["outcomes"],
    "launch": ["launch", "--out", "run"],
}


@pytest.mark.parametrize("kind", list(BAD_URLS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_database_url_is_one_or_two_lines(tmp_path, command, kind):
    if kind == "unreachable":
        pytest.importorskip("psycopg", reason="needs the psycopg driver (forkgym[postgres])")
    url, message = BAD_URLS[kind]
    result = forkgym(*COMMANDS[command], "--db", url, cwd=tmp_path)
    said = lines(result)
    assert result.returncode == 2, said
    assert 1 <= len(said) <= 2, said
    assert said[0].startswith("error: --db: ") and message in said[0]
    assert "secret" not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_a_missing_driver_says_what_to_install(tmp_path):
    pytest.importorskip("sqlalchemy")
    if __import__("importlib").util.find_spec("psycopg2") is not None:
        pytest.skip("psycopg2 is installed here")
    result = forkgym("outcomes", "--db", "postgresql+psycopg2://u@127.0.0.1/db", cwd=tmp_path)
    (said,) = lines(result)
    assert result.returncode == 2 and "No module named 'psycopg2'" in said
    assert "forkgym[postgres]" in said


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["temprature=0.5"], "unknown config key 'temprature' (did you mean 'temperature'?)"),
        (
            ["prompt_per_step=2", "stepz=3"],
            "'prompt_per_step' (did you mean 'prompts_per_step'?), 'stepz' (did you mean 'steps'?)",
        ),
        (["optim.lr=1"], "unknown config key 'optim'; the keys: docs/training.md#configuration"),
    ],
)
@pytest.mark.parametrize("command", ["train", "launch"])
def test_an_unknown_config_key_gets_a_did_you_mean_in_at_most_three_lines(
    tmp_path, command, overrides, expected
):
    result = forkgym(command, "--out", "run", *overrides, cwd=tmp_path)
    said = lines(result)
    assert result.returncode == 2, said
    assert len(said) <= 3 and expected in " ".join(said), said
    assert "'weight_decay'" not in result.stderr  # no longer every key
    assert not (tmp_path / "run").exists()


MISTAKES = {
    "a missing config file": (["train", "--config", "nothere.yaml"], "does not exist"),
    "a model that is a file": (
        ["eval", "--model", "config.json", "--env", "Arithmetic-v0"],
        "is a file",
    ),
    "an unknown algorithm": (["train", "--algorithm", "a2c", "--out", "run"], "is not one of"),
    "a value of the wrong type": (["train", "--steps", "x"], "'--steps'"),
    "eval without a model": (["eval"], "give --model and --env"),
    "verify without input": (["verify"], "give exactly one of"),
    "an unknown subcommand": (["envs", "chek"], "No such command"),
    "an unknown preset": (["bench", "--preset", "nope"], "unknown preset 'nope'"),
    "no worker": (["serve", "--workers", "-3"], "at least one worker"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_every_usage_mistake_is_at_most_two_lines(tmp_path, mistake):
    """Issue 48: a missing config printed a 61-line traceback and a model path naming a file
    151 lines; a usage error was Typer's six-line panel. Now each is `error: ...` and at most
    a line saying where the help is."""
    (tmp_path / "config.json").write_text("{}")
    args, message = MISTAKES[mistake]
    result = forkgym(*args, cwd=tmp_path)
    said = lines(result)
    assert result.returncode == 2, said
    assert 1 <= len(said) <= 2 and said[0].startswith("error: ") and message in said[0], said
    assert not (tmp_path / "run").exists()

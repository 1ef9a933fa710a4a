from typer.testing import CliRunner

from forkgym.cli import app
from forkgym.envs import ENVIRONMENTS

runner = CliRunner()


def test_list_shows_every_env():
    result = runner.invoke(app, ["envs", "list"], terminal_width=200)
    assert result.exit_code == 0
    for env_id in ENVIRONMENTS:
        assert env_id in result.stdout


def test_show_describes_spaces_kwargs_tools_and_a_task():
    result = runner.invoke(
        app, ["envs", "show", "Calculator-v0", "--seed", "4", "-k", "digits=6"], terminal_width=200
    )
    assert result.exit_code == 0, result.stdout
    for fragment in (
        "observation space",
        "action space",
        "kwargs digits=5",
        "tool calculator",
        "example task",
        "reference answer",
    ):
        assert fragment in result.stdout
    assert runner.invoke(app, ["envs", "show", "Nope-v0"]).exit_code == 2
    assert runner.invoke(app, ["envs", "show", "Arithmetic-v0", "-k", "digits"]).exit_code == 2


def test_show_lists_the_common_kwargs_system_prompt_included():
    """The base class's keyword arguments come from its signature, not a list kept by hand."""
    result = runner.invoke(app, ["envs", "show", "Arithmetic-v0"])
    assert result.exit_code == 0, result.stdout
    text = " ".join(result.stdout.split())  # rich wraps at 80 columns here
    kwargs = text[text.index("kwargs digits=") : text.index("system prompt ")]
    for name in ("system_prompt=", "verifier=", "rewards=", "max_chars=", "render_mode="):
        assert name in kwargs
    assert "config=" not in kwargs
    assert "system prompt 'You are a careful mathematician." in text
    quiet = runner.invoke(app, ["envs", "show", "Arithmetic-v0", "-k", "system_prompt=null"])
    assert "system prompt none" in quiet.stdout


def test_play_scripted_and_interactive():
    result = runner.invoke(
        app, ["envs", "play", "forkgym/Calculator-v0", "--seed", "1", "-a", ":gold", "-a", ":gold"]
    )
    assert result.exit_code == 0 and "episode over: correct" in result.stdout
    typed = "I believe \\boxed{0}\n.\n:gold\n"
    result = runner.invoke(
        app, ["envs", "play", "Arithmetic-v0", "-k", "max_attempts=2"], input=typed
    )
    assert (
        result.exit_code == 0
        and "turn 1: retry" in result.stdout
        and "episode over: correct" in result.stdout
    )
    result = runner.invoke(app, ["envs", "play", "Arithmetic-v0"], input=":quit\n")
    assert result.exit_code == 1 and "stopped" in result.stdout

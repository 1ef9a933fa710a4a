"""The ``forkgym`` command line. Each sub-command is a thin shell over the library API."""

from __future__ import annotations

from typing import Annotated

import typer
import typer.rich_utils

from forkgym import __version__

from .bench import bench
from .envs import envs_app
from .launch import launch
from .service import outcomes, sandbox_app, serve
from .train import TrainCommand, evaluate, model_app, runs_app, sft, train
from .verify import verify


def _usage_error_in_two_lines(error: Exception) -> None:
    """A usage error as two lines on stderr, what is wrong and where the help is, in place of
    Typer's six-line panel (the rest of the command line keeps Typer's formatting)."""
    if type(error).__name__ == "NoArgsIsHelpError":  # the help was printed: nothing to add
        return
    typer.echo(f"error: {error.format_message()}", err=True)  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)  # a click error may carry no context
    if ctx is not None:
        typer.echo(f"Try '{ctx.command_path} --help'.", err=True)


# Typer calls rich_utils.rich_format_error for every usage error when rich is installed
typer.rich_utils.rich_format_error = _usage_error_in_two_lines  # type: ignore[assignment]

app = typer.Typer(
    name="forkgym",
    help="Reproducible text environments, honest verifiers and critic-free RL for LMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="markdown",
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"forkgym {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool | None,
        typer.Option(
            "--version",
            callback=_version_callback,
            is_eager=True,
            help="Show the version and exit.",
        ),
    ] = None,
) -> None:
    """forkgym: Gymnasium text environments, verifiers and critic-free policy-gradient training."""


app.command()(verify)
app.add_typer(envs_app, name="envs")
app.command()(serve)
app.command()(outcomes)
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(model_app, name="model")
app.command()(sft)
app.command(cls=TrainCommand)(train)
app.command("eval")(evaluate)
app.add_typer(runs_app, name="runs")
app.command()(bench)
app.command()(launch)


def main() -> None:
    from forkgym.envs.sandbox.isolation import SandboxUnavailable

    try:
        app()
    except SandboxUnavailable as exc:  # only what runs model code needs it: one line, no trace
        typer.echo(f"forkgym: {exc}", err=True)
        raise SystemExit(2) from None

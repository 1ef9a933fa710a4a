"""``forkgym envs``: list, inspect and play the registered environments."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

envs_app = typer.Typer(
    help="List, inspect and play forkgym environments.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
console = Console(highlight=False)

KwargOption = Annotated[
    list[str] | None,
    typer.Option(
        "--kwarg",
        "-k",
        help="Constructor argument KEY=VALUE (VALUE as JSON, else a string); repeatable.",
    ),
]


def _env_id(name: str) -> str:
    return name if "/" in name or ":" in name else f"forkgym/{name}"


def parse_kwargs(pairs: list[str] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key] = raw
    return kwargs


def _make(name: str, kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    import forkgym.envs  # noqa: F401 - registers the environments

    env_id = _env_id(name)
    if env_id not in gym.registry and ":" not in env_id:
        raise typer.BadParameter(f"unknown environment {env_id!r}; see `forkgym envs list`")
    try:
        return gym.make(env_id, **kwargs).unwrapped
    except TypeError as exc:
        valid = ", ".join(env_kwargs_of(env_id)) or "none"
        raise typer.BadParameter(f"cannot make {env_id}: {_without_qualname(exc)}; its keyword arguments: {valid}") from None  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(f"cannot make {env_id}: {exc}") from None


def _without_qualname(exc: Exception) -> str:
    """``TextEnv.__init__() got an unexpected ...`` reads as ``got an unexpected ...``."""
    text = str(exc)
    head, sep, rest = text.partition("() ")
    return rest if sep and "." in head else text


def env_kwargs_of(env_id: str) -> list[str]:
    """The keyword arguments ``gym.make(env_id, ...)`` accepts (the env class's and its
    bases' named parameters)."""
    import inspect

    import gymnasium as gym

    entry = gym.spec(env_id).entry_point
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(__import__(module, fromlist=[attr]), attr)
    names: list[str] = []
    for cls in getattr(entry, "__mro__", [entry]):
        init = getattr(cls, "__init__", None)
        if init is None or init is object.__init__:
            continue
        for name, param in inspect.signature(init).parameters.items():
            if name != "self" and param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD) and name not in names:  # fmt: skip
                names.append(name)
    return sorted(names)


def check_env(name: str, kwargs: dict[str, Any]) -> str:
    """The full id of an env that builds with ``kwargs`` (a one-line error otherwise)."""
    env = _make(name, kwargs)
    env.close()
    return _env_id(name)


@envs_app.command("list")
def list_envs() -> None:
    """The registered environments."""
    from forkgym.envs import ENVIRONMENTS

    table = Table(title="forkgym environments")
    table.add_column("id")
    table.add_column("turns")
    table.add_column("summary")
    for info in ENVIRONMENTS.values():
        table.add_row(
            info.id, "multi (tools)" if info.multi_turn else "single / retries", info.summary
        )
    console.print(table)


@envs_app.command("show")
def show(
    env_id: Annotated[str, typer.Argument(help="e.g. forkgym/Arithmetic-v0 (or Arithmetic-v0).")],
    seed: Annotated[int, typer.Option(help="Seed of the example task.")] = 0,
    kwarg: KwargOption = None,
) -> None:
    """Description, spaces, constructor arguments, tools and an example task."""
    env = _make(env_id, parse_kwargs(kwarg))
    obs, info = env.reset(seed=seed)
    doc = inspect.getdoc(type(env)) or ""
    module_doc = (inspect.getdoc(sys.modules[type(env).__module__]) or "").split("\n\n")
    console.print(f"[bold]{_env_id(env_id)}[/bold]  ({type(env).__module__}.{type(env).__name__})")
    console.print(doc)
    for paragraph in module_doc[1:]:  # the module docstring's body, re-flowed
        console.print(" ".join(paragraph.split()))
    console.print(f"\n[bold]observation space[/bold] {env.observation_space}")
    console.print(f"[bold]action space[/bold] {env.action_space}")
    params = inspect.signature(type(env).__init__).parameters.values()
    own = [p for p in params if p.name != "self" and p.kind is p.POSITIONAL_OR_KEYWORD]
    args = [f"{p.name}={p.default!r}" for p in own]
    # the base classes' keyword arguments (system_prompt=, verifier=, ...), from their
    # signatures rather than a list kept by hand; `config` is what a subclass passes up
    common = [
        f"{name}="
        for name in env_kwargs_of(_env_id(env_id))
        if name not in {p.name for p in own} | {"config"}
    ]
    plus = f"  (plus {', '.join(common)})" if common else ""
    console.print(f"[bold]kwargs[/bold] {', '.join(args)}{plus}")
    prompt = getattr(env, "system_prompt", None)
    console.print(f"[bold]system prompt[/bold] {'none' if prompt is None else repr(prompt)}")
    tools = getattr(env, "tools", None)
    if tools:
        for spec in tools.values():
            console.print(
                f"[bold]tool[/bold] {spec.name}({', '.join(f'{k}: {v}' for k, v in spec.params.items())}): {spec.description}"
            )
    console.print(f"\n[bold]example task[/bold] (seed {seed}, task_id {info['task_id']})")
    console.print(obs["messages"][-1]["content"])
    console.print(f"[bold]reference answer[/bold] {env.task.answer}")
    console.print(f"[bold]gold first action[/bold]\n{env.gold_action()}")


def _read_action() -> str | None:
    console.print(
        "[dim]Your message (end with a line containing only '.', or :gold / :quit):[/dim]"
    )
    lines: list[str] = []
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not lines and line.strip() in {":gold", ":quit"}:
            return line.strip()
        if line == ".":
            break
        lines.append(line)
    else:
        if not lines:
            return None
    return "\n".join(lines)


@envs_app.command("play")
def play(
    env_id: Annotated[str, typer.Argument(help="e.g. forkgym/Calculator-v0.")],
    seed: Annotated[int, typer.Option(help="Seed of the task.")] = 0,
    kwarg: KwargOption = None,
    action: Annotated[
        list[str] | None,
        typer.Option(
            "--action",
            "-a",
            help="Play these messages instead of asking (':gold' = the gold action).",
        ),
    ] = None,
) -> None:
    """Play an episode in the terminal: you are the assistant."""
    env = _make(env_id, parse_kwargs(kwarg))
    obs, info = env.reset(seed=seed)
    for message in obs["messages"]:
        console.print(f"[bold]{message['role']}[/bold]: {message['content']}\n")
    scripted = list(action) if action is not None else None
    done, shown = False, len(obs["messages"])
    while not done:
        text = _read_action() if scripted is None else (scripted.pop(0) if scripted else None)
        if text is None or text == ":quit":
            console.print("[dim]stopped before the episode ended[/dim]")
            raise typer.Exit(code=1)
        if text == ":gold":
            text = env.gold_action()
        if scripted is not None:
            console.print(f"[bold]assistant[/bold]: {text}\n")
        obs, _, terminated, truncated, info = env.step(text)
        for message in obs["messages"][shown + 1 :]:
            console.print(f"[bold]{message['role']}[/bold]: {message['content']}\n")
        shown = len(obs["messages"])
        console.print(f"[dim]turn {info['turn']}: {info['status']}[/dim]")
        done = terminated or truncated
    outcome = info["outcome"]
    console.print(
        f"\n[bold]episode over[/bold]: {outcome.status.value}, reward {outcome.reward}, "
        f"{'truncated' if truncated else 'terminated'}; reference answer {env.task.answer}"
    )

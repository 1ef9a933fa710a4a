"""The parts of ``forkgym eval``: its settings (given, a run's, or the defaults), the model a
backend needs, the progress bar, and the held-out evaluation itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from .envs import _env_id, check_env, parse_kwargs
from .errors import fail


@dataclass
class EvalSettings:
    """What one ``forkgym eval`` evaluates, every option resolved."""

    model: str
    env: str  # the full id
    env_kwargs: dict[str, Any]
    episodes: int
    seed: int
    pass_k: int
    max_new_tokens: int
    temperature: float


def check_backend(backend: str, base_url: str | None, served_model: str | None) -> None:
    """Refuse a backend that is not registered or cannot start here, and the server options
    without ``--backend openai``."""
    from forkgym.agents.generation.backends.registry import BACKENDS, missing_requirement

    if backend not in BACKENDS:
        raise typer.BadParameter(
            f"{backend!r} is not one of {sorted(BACKENDS)}", param_hint="--backend"
        )
    if missing := missing_requirement(backend):
        raise typer.BadParameter(missing, param_hint="--backend")
    if (base_url is not None or served_model is not None) and backend != "openai":
        raise typer.BadParameter("--base-url and --served-model go with --backend openai")


def _given(value: Any, default: Any) -> Any:
    return value if value is not None else default


def eval_settings(
    run: Path | None,
    *,
    model: str | None,
    env: str | None,
    episodes: int | None,
    seed: int | None,
    pass_k: int | None,
    max_new_tokens: int | None,
    held_out: bool | None,
    kwarg: list[str] | None,
) -> EvalSettings:
    """Each setting as given, else the ``--run`` folder's, else the defaults; the env (on the
    side of the content partition asked for) is checked to build."""
    import forkgym.envs  # noqa: F401 - registers the environments (before a run's plugins)
    from forkgym.envs.base import on_side

    saved = run_settings(run, model_given=model is not None) if run is not None else {}
    model = model or saved.get("model")
    env = env or saved.get("env")
    if model is None or env is None:
        raise typer.BadParameter("give --model and --env, or --run DIR (a training run's folder)")
    settings = {**eval_defaults(), **saved}
    held = _given(held_out, settings.get("held_out", True))
    kwargs = {**settings.get("env_kwargs", {}), **parse_kwargs(kwarg)}
    try:
        kwargs = on_side(kwargs, "eval" if held else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="-k task_split") from None
    check_env(env, kwargs)
    return EvalSettings(
        model=model,
        env=_env_id(env),
        env_kwargs=kwargs,
        episodes=_given(episodes, settings["episodes"]),
        seed=_given(seed, settings["seed"]),
        pass_k=_given(pass_k, settings["pass_k"]),
        max_new_tokens=_given(max_new_tokens, settings["max_new_tokens"]),
        temperature=settings["temperature"],
    )


def eval_defaults() -> dict[str, Any]:
    """``forkgym eval``'s defaults: the token budget, held-out seed and sampling temperature
    are TrainConfig's (one source of truth), so that a model trained with the defaults is
    evaluated as its run evaluated it."""
    from forkgym.agents.run.config import TrainConfig

    return {
        "episodes": 200,
        "seed": TrainConfig.eval_seed,
        "pass_k": 0,
        "max_new_tokens": TrainConfig.max_new_tokens,
        "temperature": TrainConfig.temperature,
    }


def _read_run_config(run: Path) -> dict[str, Any]:
    """The run folder's saved config, its plugins loaded; a usage error if there is none."""
    from forkgym.agents.run.config import ConfigError, load_plugins, read_file

    hint = "--run"
    if not run.is_dir():
        raise typer.BadParameter(f"{run} is not a directory", param_hint=hint)
    if not (run / "config.yaml").is_file():
        raise typer.BadParameter(
            f"{run} is not a run folder (no config.yaml); give the --out folder of `forkgym train`",
            param_hint=hint,
        )
    try:
        saved = read_file(run / "config.yaml")
    except (ConfigError, OSError, ValueError) as exc:  # yaml's errors are ValueErrors
        raise typer.BadParameter(
            f"{run}/config.yaml is unreadable: {exc}", param_hint=hint
        ) from None
    if problems := load_plugins(saved.get("plugins") or []):
        raise typer.BadParameter("; ".join(problems), param_hint=hint)
    return saved


def run_settings(run: Path, *, model_given: bool) -> dict[str, Any]:
    """What ``forkgym eval`` takes from a run folder: its latest checkpoint (the model and the
    tokenizer with its chat template), env and env kwargs (the prompt settings), token budget,
    sampling temperature and held-out evaluation settings. Read from the saved config without
    validating it again, so a run evaluates on a machine without its training backend."""
    from forkgym.agents.run.checkpoint import Checkpoints
    from forkgym.agents.run.config import TrainConfig

    saved = _read_run_config(run)

    def get(key: str) -> Any:
        return saved.get(key, getattr(TrainConfig, key, None))

    settings: dict[str, Any] = {
        "env": get("env"),
        "env_kwargs": dict(saved.get("env_kwargs") or {}),
        "max_new_tokens": get("max_new_tokens"),
        "temperature": get("temperature"),
        "episodes": get("eval_episodes"),
        "seed": get("eval_seed"),
        "pass_k": get("eval_k"),
        "held_out": saved.get("held_out", False),  # runs from before the partition: all tasks
    }
    if not model_given:
        checkpoints = Checkpoints(run).all()
        if not checkpoints:
            raise typer.BadParameter(
                f"{run} has no checkpoint yet (checkpoints/step_*); train it further, or pass --model",
                param_hint="--run",
            )
        settings["model"] = str(checkpoints[-1])
    return settings


def load_eval_model(
    model: str, backend: str, base_url: str | None, served_model: str | None
) -> tuple[Any, Any, dict[str, Any]]:
    """The network (None for a server or an engine that loads it), the tokenizer and the
    backend's options; a model that is not there is a usage error."""
    from forkgym.agents.models import load_policy_model, load_tokenizer

    if backend == "openai" and base_url is None:
        raise typer.BadParameter("--backend openai needs --base-url")
    try:
        if backend == "openai":
            options = {"base_url": base_url, "served_model": served_model}
            return None, load_tokenizer(model), options
        if backend == "vllm":  # the engine loads the weights itself and never takes new ones
            return None, load_tokenizer(model), {"model_path": model, "weight_push": False}
        net, tokenizer = load_policy_model(model)
    except FileNotFoundError as exc:
        fail(f"--model: {exc}")
    net.eval()
    return net, tokenizer, {}


@contextmanager
def eval_progress(show: bool) -> Iterator[Any]:
    """A bar over the held-out tasks, pass by pass, on stderr (stdout carries the JSON); with
    --no-progress no callback, so the tasks go to the policy in one batch."""
    if not show:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("episodes"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    tasks: dict[str, Any] = {}

    def on_progress(what: str, done: int, total: int) -> None:
        if what not in tasks:
            tasks[what] = bar.add_task(f"evaluating {what}", total=total)
        bar.update(tasks[what], completed=done)

    with bar:
        yield on_progress


def evaluate_held_out(
    settings: EvalSettings,
    backend: str,
    loaded: tuple[Any, Any, dict[str, Any]],
    *,
    show_progress: bool,
) -> dict[str, Any]:
    """Evaluate the loaded model (``load_eval_model``'s) on the backend's policy, which is
    closed (its engine shut down) however the evaluation ends."""
    from forkgym.agents.generation.backends.registry import build_policy
    from forkgym.agents.generation.evaluate import evaluate_env

    net, tokenizer, options = loaded
    policy = build_policy(backend, net, tokenizer, seed=settings.seed, **options)
    with closing(policy), eval_progress(show_progress) as on_progress:
        return evaluate_env(
            policy,
            tokenizer,
            settings.env,
            settings.env_kwargs,
            episodes=settings.episodes,
            seed=settings.seed,
            k=settings.pass_k,
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            progress=on_progress,
            chunk=max(8, -(-settings.episodes // 20)),  # about 20 updates of the bar
        )

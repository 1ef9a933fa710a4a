"""``forkgym model init``, ``sft``, ``train``, ``eval`` and ``runs``: the training commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .endings import recorded_ending
from .envs import KwargOption, check_env, parse_kwargs
from .errors import fail

console = Console(highlight=False)
model_app = typer.Typer(help="Build the default offline model.", no_args_is_help=True)
runs_app = typer.Typer(help="List, show and plot training runs.", no_args_is_help=True)


def _env_id(name: str) -> str:
    return name if "/" in name or ":" in name else f"forkgym/{name}"


@model_app.command("init")
def model_init(
    out: Annotated[Path, typer.Option(help="Directory to write the model and tokenizer to.")],
    size: Annotated[
        str, typer.Option(help="Model size (see forkgym.agents.models.MODEL_SIZES).")
    ] = "tiny",
    seed: Annotated[int, typer.Option(help="Seed of the initial weights.")] = 0,
) -> None:
    """Build a small Llama-style model and a tokenizer of the environments' text, offline."""
    from forkgym.agents.models import MODEL_SIZES, init_model

    if size not in MODEL_SIZES:
        raise typer.BadParameter(f"size must be one of {sorted(MODEL_SIZES)}")
    path = init_model(out, size=size, seed=seed)
    console.print(f"wrote a {size} model to {path}")


def sft(
    model: Annotated[str, typer.Option(help="Model directory (or hub name) to start from.")],
    env: Annotated[str, typer.Option(help="Environment whose gold trajectories to learn.")],
    tokens: Annotated[int, typer.Option(min=1, help="Assistant tokens to train on.")],
    out: Annotated[Path, typer.Option(help="Where to save the trained model.")],
    seed: Annotated[int, typer.Option(help="Seed of the demonstrations and the run.")] = 0,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 3e-3,
    batch_size: Annotated[int, typer.Option(min=1, help="Demonstrations per step.")] = 32,
    kwarg: KwargOption = None,
    held_out: Annotated[
        bool,
        typer.Option(
            "--held-out/--all-tasks",
            help="Demonstrate only problems of the train side of the content partition (what "
            "train and eval hold out), or every problem.",
        ),
    ] = True,
) -> None:
    """Supervised warm start on the environment's gold demonstrations."""
    from forkgym.agents.run.sft import sft as run_sft

    result = run_sft(
        model,
        _env_id(env),
        tokens=tokens,
        out=out,
        seed=seed,
        lr=lr,
        batch_size=batch_size,
        env_kwargs=parse_kwargs(kwarg),
        held_out=held_out,
    )
    typer.echo(json.dumps({"out": str(out), **result}))


def train(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Config overrides key=value (e.g. lr=3e-4 env_kwargs.digits=3)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model directory (or hub name).")] = None,
    env: Annotated[str | None, typer.Option(help="Environment id.")] = None,
    estimator: Annotated[
        str | None, typer.Option(help="rloo, grpo, dr_grpo, remax, reinforce, ...")
    ] = None,
    algorithm: Annotated[
        str | None,
        typer.Option(help="critic_free (the estimator) or ppo (a learned critic)."),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(help="What generates: hf (transformers, the default) or vllm."),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps.")] = None,
    seed: Annotated[int | None, typer.Option(help="Run seed.")] = None,
    out: Annotated[str | None, typer.Option(help="Run directory.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML or TOML config file.")] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show the live progress bar.")
    ] = True,
) -> None:
    """Train a policy (a critic-free estimator, or PPO with a learned critic); metrics,
    checkpoints and the resolved config go to --out. Any config key can be set as key=value."""
    from forkgym.agents.run.config import ConfigError, TrainConfig
    from forkgym.agents.run.trainer import Trainer

    values: dict[str, Any] = {
        "model": model,
        "env": _env_id(env) if env else None,
        "estimator": estimator,
        "algorithm": algorithm,
        "backend": backend,
        "steps": steps,
        "seed": seed,
        "out": out,
    }
    if not progress:
        values["progress"] = False
    try:
        cfg = TrainConfig.load(config, overrides, **values)
    except ConfigError as exc:
        fail(str(exc))
    _check_run(cfg, model_given=model is not None or _file_sets(config, overrides, "model"))
    # however the run ends, its engine is shut down and the run folder says why (endings.py)
    with recorded_ending("train", cfg.out):
        try:
            trainer = Trainer(cfg, resume=resume)
        except FileNotFoundError as exc:
            raise typer.BadParameter(str(exc)) from None
        with trainer:
            # under torchrun every rank runs this command; rank 0 alone draws and reports
            last = _run_with_progress(trainer, show=cfg.progress and trainer.world.main)
    if not trainer.world.main:
        return
    summary = {
        k: last.get(k)
        for k in ("reward_mean", "accuracy", "eval_accuracy", "tokens_generated")
        if k in last
    }
    typer.echo(json.dumps({"run": cfg.out, "step": trainer.step, **summary}))


def _file_sets(config: Path | None, overrides: list[str] | None, key: str) -> bool:
    """Whether the config file or an override names ``key``."""
    from forkgym.agents.run.config import read_file

    named = config is not None and key in read_file(config)
    return named or any(o.split("=", 1)[0].strip() == key for o in overrides or [])


def _check_run(cfg: Any, *, model_given: bool) -> None:
    """What would fail minutes into a run, refused before anything is written: a missing
    model (never looked up on the hub when it is a path), an env id or keyword argument that
    does not exist, TensorBoard or W&B asked for without its package."""
    from forkgym.agents.models import missing_local_model

    from .envs import check_env

    if not model_given and not Path(cfg.model).exists():
        raise typer.BadParameter(
            f"no --model given, and the default {cfg.model} does not exist; build it with "
            f"`forkgym model init --out {cfg.model}` (or pass --model DIR or a hub name)"
        )
    if problem := missing_local_model(cfg.model):  # the trainer loads it, whatever generates
        raise typer.BadParameter(problem, param_hint="--model")
    check_env(cfg.env, dict(cfg.env_kwargs))
    if cfg.tensorboard:
        try:
            import torch.utils.tensorboard  # noqa: F401
        except ImportError:
            raise typer.BadParameter(
                "tensorboard=true needs the tensorboard package: pip install tensorboard"
            ) from None
    if cfg.wandb:
        import importlib.util

        from forkgym.agents.run.runlog import WANDB_INSTALL_HINT

        if importlib.util.find_spec("wandb") is None:
            raise typer.BadParameter(WANDB_INSTALL_HINT)


def phase_label(config: Any, phase: str) -> str:
    """What the train bar says the run is doing (an evaluation can take minutes)."""
    if phase == "eval":
        sampled = f", pass@{config.eval_k}" if config.eval_k else ""
        return f"evaluating (held-out, {config.eval_episodes} episodes{sampled})"
    return "training"


def _run_with_progress(trainer: Any, show: bool) -> dict[str, Any]:
    """``trainer.run()`` under a live progress bar: what it is doing (training, evaluating),
    step, reward, accuracy, speed, held-out. A run that fails closes its log (W&B marks it
    failed) before the error goes on."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("{task.description}"),
        TextColumn("step {task.completed}/{task.total}"),
        BarColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        disable=not show,
    )
    with progress:
        task = progress.add_task(
            "starting", total=trainer.config.steps, completed=trainer.step, info=""
        )

        def on_step(step: int, metrics: dict[str, Any]) -> None:
            info = (
                f"reward {metrics.get('reward_mean') or 0:.3f}  "
                f"acc {metrics.get('accuracy', 0):.3f}  "
                f"{metrics.get('tokens_per_s', 0):,.0f} tok/s"
            )
            if "eval_accuracy" in metrics:
                info += f"  eval {metrics['eval_accuracy']:.3f}"
            progress.update(task, completed=step, info=info)

        def on_phase(phase: str, step: int) -> None:
            label = phase_label(trainer.config, phase)
            progress.update(task, description=label, completed=step)

        try:
            return trainer.run(on_step=on_step, on_phase=on_phase)
        except BaseException:
            trainer.log.close(exit_code=1)
            raise


def evaluate(
    model: Annotated[
        str | None,
        typer.Option(
            help="Model directory (or hub name); with --backend openai, its tokenizer. "
            "With --run: the run's latest checkpoint."
        ),
    ] = None,
    env: Annotated[str | None, typer.Option(help="Environment id. With --run: the run's.")] = None,
    run: Annotated[
        Path | None,
        typer.Option(
            help="A training run's folder (train's --out): evaluate its latest checkpoint with "
            "its env, env kwargs, token budget and held-out settings; options given override them."
        ),
    ] = None,
    episodes: Annotated[
        int | None,
        typer.Option(min=1, help="Held-out tasks. [default: 200; with --run, its eval_episodes]"),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the held-out task stream. [default: train's eval_seed, or the run's]"
        ),
    ] = None,
    pass_k: Annotated[
        int | None,
        typer.Option(
            "--pass-k",
            min=0,
            help="Also sampled pass@k (0: off). [default: 0; with --run, its eval_k]",
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Token budget per assistant turn. [default: train's max_new_tokens, or the run's]",
        ),
    ] = None,
    backend: Annotated[
        str, typer.Option(help="hf (transformers), vllm (in-process) or openai (a server).")
    ] = "hf",
    base_url: Annotated[
        str | None, typer.Option(help="--backend openai: the server, e.g. http://host:8000/v1.")
    ] = None,
    served_model: Annotated[
        str | None,
        typer.Option(help="--backend openai: the served model's name (default: the first)."),
    ] = None,
    kwarg: KwargOption = None,
    progress: Annotated[
        bool,
        typer.Option("--progress/--no-progress", help="Show a progress bar (on stderr)."),
    ] = True,
    held_out: Annotated[
        bool | None,
        typer.Option(
            "--held-out/--all-tasks",
            help="Evaluate on the eval side of the content partition (problems no training "
            "prompt or demonstration had), or on every problem. Default: held out, or as the "
            "--run was.",
        ),
    ] = None,
) -> None:
    """Greedy pass@1 (and optionally sampled pass@k) on held-out tasks; prints JSON.

    With --run, the run's own held-out evaluation of its latest checkpoint."""
    import gymnasium as gym

    import forkgym.envs  # noqa: F401
    from forkgym.agents.generation.backends.registry import BACKENDS, missing_requirement
    from forkgym.agents.generation.evaluate import evaluate as run_eval
    from forkgym.envs.base import on_side

    if backend not in BACKENDS:
        raise typer.BadParameter(
            f"{backend!r} is not one of {sorted(BACKENDS)}", param_hint="--backend"
        )
    if missing := missing_requirement(backend):
        raise typer.BadParameter(missing, param_hint="--backend")
    if (base_url is not None or served_model is not None) and backend != "openai":
        raise typer.BadParameter("--base-url and --served-model go with --backend openai")
    saved = _run_settings(run, model_given=model is not None) if run is not None else {}
    model = model or saved.get("model")
    env = env or saved.get("env")
    if model is None or env is None:
        raise typer.BadParameter("give --model and --env, or --run DIR (a training run's folder)")
    settings = {**_eval_defaults(), **saved}
    episodes = episodes if episodes is not None else settings["episodes"]
    seed = seed if seed is not None else settings["seed"]
    pass_k = pass_k if pass_k is not None else settings["pass_k"]
    max_new_tokens = max_new_tokens if max_new_tokens is not None else settings["max_new_tokens"]
    held = held_out if held_out is not None else settings.get("held_out", True)
    kwargs = {**settings.get("env_kwargs", {}), **parse_kwargs(kwarg)}
    try:
        kwargs = on_side(kwargs, "eval" if held else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="-k task_split") from None
    check_env(env, kwargs)
    try:
        net, tokenizer, options = _eval_model(model, backend, base_url, served_model)
    except FileNotFoundError as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None

    def held_out(policy: Any, on_progress: Any) -> dict[str, Any]:
        return run_eval(
            policy,
            tokenizer,
            lambda: gym.make(_env_id(env), **kwargs),
            episodes=episodes,
            seed=seed,
            k=pass_k,
            max_new_tokens=max_new_tokens,
            temperature=settings["temperature"],
            progress=on_progress,
            chunk=max(8, -(-episodes // 20)),  # about 20 updates of the bar
        )

    with recorded_ending("eval", None):
        result = _evaluate_with(backend, net, tokenizer, seed, options, progress, held_out)
    typer.echo(
        json.dumps(
            {
                **({"run": str(run)} if run is not None else {}),
                "model": model,
                "env": _env_id(env),
                "backend": backend,
                "episodes": episodes,
                "max_new_tokens": max_new_tokens,
                "accuracy": result["eval_accuracy"],
                **result,
            }
        )
    )


def _evaluate_with(
    backend: str,
    net: Any,
    tokenizer: Any,
    seed: int,
    options: dict[str, Any],
    progress: bool,
    run: Any,
) -> dict[str, Any]:
    """``run(policy, on_progress)`` on the backend's policy, which is closed (its engine shut
    down) however the evaluation ends."""
    from forkgym.agents.generation.backends.registry import build_policy

    policy = build_policy(backend, net, tokenizer, seed=seed, **options)
    try:
        with _eval_progress(progress) as on_progress:
            return run(policy, on_progress)
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()


def _eval_defaults() -> dict[str, Any]:
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


def _run_settings(run: Path, *, model_given: bool) -> dict[str, Any]:
    """What ``forkgym eval`` takes from a run folder: its latest checkpoint (the model and the
    tokenizer with its chat template), env and env kwargs (the prompt settings), token budget,
    sampling temperature and held-out evaluation settings. Read from the saved config without
    validating it again, so a run evaluates on a machine without its training backend."""
    from forkgym.agents.run.checkpoint import Checkpoints
    from forkgym.agents.run.config import ConfigError, TrainConfig, load_plugins, read_file

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
                param_hint=hint,
            )
        settings["model"] = str(checkpoints[-1])
    return settings


@contextmanager
def _eval_progress(show: bool) -> Iterator[Any]:
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


def _eval_model(
    model: str, backend: str, base_url: str | None, served_model: str | None
) -> tuple[Any, Any, dict[str, Any]]:
    """The network (None for a server), the tokenizer and the backend's options."""
    from forkgym.agents.models import load_policy_model, load_tokenizer

    if backend == "openai":
        if base_url is None:
            raise typer.BadParameter("--backend openai needs --base-url")
        return None, load_tokenizer(model), {"base_url": base_url, "served_model": served_model}
    if backend == "vllm":  # the engine loads the weights itself and never takes new ones
        return None, load_tokenizer(model), {"model_path": model, "weight_push": False}
    net, tokenizer = load_policy_model(model)
    net.eval()
    return net, tokenizer, {}


@runs_app.command("list")
def runs_list(
    root: Annotated[Path, typer.Argument(help="Directory holding run directories.")] = Path("runs"),
) -> None:
    """Runs under ROOT: estimator, env, steps done, last reward and held-out accuracy."""
    from forkgym.agents.run.runlog import read_metrics

    if not root.is_dir():
        raise typer.BadParameter(f"{root} is not a directory", param_hint="ROOT")
    table = Table(title=f"runs in {root}")
    for column in ("run", "env", "estimator", "steps", "reward", "eval accuracy"):
        table.add_column(column)
    for config_path in sorted(root.glob("**/config.yaml")):
        import yaml

        cfg = yaml.safe_load(config_path.read_text())
        metrics = read_metrics(config_path.parent)
        last = metrics[-1] if metrics else {}
        evals = [m["eval_accuracy"] for m in metrics if m.get("eval_accuracy") is not None]
        table.add_row(
            str(config_path.parent.relative_to(root)), cfg.get("env", "?"), cfg.get("estimator", "?"), str(last.get("step", 0)),
            f"{last['reward_mean']:.3f}" if last.get("reward_mean") is not None else "-",
            f"{evals[-1]:.3f}" if evals else "-",
        )  # fmt: skip
    console.print(table)


@runs_app.command("show")
def runs_show(run: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """The run's config and a table of its evaluation steps."""
    from forkgym.agents.run.runlog import read_metrics

    if not (run / "config.yaml").exists():
        raise typer.BadParameter(f"{run} is not a run directory (no config.yaml)")
    console.print((run / "config.yaml").read_text())
    table = Table(title="evaluations")
    for column in ("step", "tokens generated", "reward", "eval accuracy"):
        table.add_column(column)
    tokens = 0
    for m in read_metrics(run):
        tokens += m.get("tokens_generated") or 0
        if m.get("eval_accuracy") is not None:
            reward = m.get("reward_mean")
            table.add_row(
                str(m["step"]),
                f"{tokens:,}",
                "-" if reward is None else f"{reward:.3f}",
                f"{m['eval_accuracy']:.3f}",
            )
    console.print(table)


@runs_app.command("plot")
def runs_plot(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to draw.")],
    out: Annotated[Path, typer.Option(help="PNG to write.")] = Path("learning_curve.png"),
) -> None:
    """Held-out accuracy and training reward against generated tokens, one line per run."""
    from forkgym.agents.run.plots import plot_runs

    for run in runs:
        if not (run / "metrics.jsonl").exists():
            raise typer.BadParameter(f"{run} is not a run directory (no metrics.jsonl)", param_hint="RUNS")  # fmt: skip
    plot_runs(runs, out)
    console.print(f"wrote {out}")

"""``forkgym model init``, ``sft``, ``train``, ``eval`` and ``runs``: the training commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand, TyperOption

from .endings import recorded_ending
from .envs import KwargOption, check_env, parse_kwargs
from .errors import fail
from .evaluation import check_backend, eval_settings, evaluate_held_out, load_eval_model

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
    tokens: Annotated[
        int,
        typer.Option(min=1, help="Assistant tokens to train on (with --target-accuracy: at most)."),
    ],
    out: Annotated[Path, typer.Option(help="Where to save the trained model.")],
    seed: Annotated[int, typer.Option(help="Seed of the demonstrations and the run.")] = 0,
    lr: Annotated[float, typer.Option(help="AdamW's peak learning rate.")] = 3e-3,
    lr_schedule: Annotated[
        str,
        typer.Option(help="After the 10 warm-up steps: constant, linear or cosine decay."),
    ] = "constant",
    lr_final_ratio: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="The decay ends at --lr times this.")
    ] = 0.0,
    lr_decay_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="Assistant tokens the decay takes. [default: --tokens]"),
    ] = None,
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
    target_accuracy: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Stop once greedy accuracy on the validation tasks reaches this (eval-side "
            "problems, none of those train evaluates on); --tokens is then the cap.",
        ),
    ] = None,
    validation_episodes: Annotated[
        int, typer.Option(min=1, help="Validation tasks, with --target-accuracy.")
    ] = 200,
    check_every: Annotated[int, typer.Option(min=1, help="Steps between validation checks.")] = 25,
    check_near: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Check every step from the first check within this of --target-accuracy on.",
        ),
    ] = 0.0,
    target_tolerance: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="If the stop lands more than this above --target-accuracy, save instead the "
            "checked model closest to the target within this of it (0: off).",
        ),
    ] = 0.0,
    eval_episodes: Annotated[
        int,
        typer.Option(
            min=1,
            help="The validation tasks keep clear of the problems of train's first this many "
            "held-out tasks (its eval_episodes, or any fewer).",
        ),
    ] = 200,
    eval_seed: Annotated[
        int | None,
        typer.Option(help="Train's eval_seed, whose tasks to keep clear of. [default: 10000]"),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="Token budget of a validation answer. [default: 32]"),
    ] = None,
) -> None:
    """Supervised warm start on the environment's gold demonstrations, for --tokens tokens
    or until --target-accuracy on validation tasks; prints JSON."""
    from forkgym.agents.learner.schedules import LR_SCHEDULES
    from forkgym.agents.run.sft import sft as run_sft

    if lr_schedule not in LR_SCHEDULES:
        raise typer.BadParameter(
            f"{lr_schedule!r} is not one of {sorted(LR_SCHEDULES)}", param_hint="--lr-schedule"
        )
    env_id, env_kwargs = _env_id(env), parse_kwargs(kwarg)
    target = None
    if target_accuracy is not None:
        target = _warm_target(
            target_accuracy, env_id, env_kwargs, held_out, validation_episodes,
            eval_episodes, eval_seed, max_new_tokens,
            {"every": check_every, "near": check_near, "tolerance": target_tolerance},
        )  # fmt: skip
    result = run_sft(
        model,
        env_id,
        tokens=tokens,
        out=out,
        seed=seed,
        lr=lr,
        batch_size=batch_size,
        env_kwargs=env_kwargs,
        held_out=held_out,
        lr_schedule=lr_schedule,
        lr_final_ratio=lr_final_ratio,
        lr_decay_tokens=lr_decay_tokens,
        until=target,
    )
    summary = target.summary() if target is not None else {}
    typer.echo(json.dumps({"out": str(out), **result, **summary}))
    if target is not None and not summary["target_reached"]:
        fail(
            f"the validation accuracy reached {summary['validation_accuracy']:.3f}, short of "
            f"--target-accuracy {target_accuracy}, when the --tokens cap ({tokens:,}) ended "
            f"training; the model in {out} is the capped one",
            code=1,
        )


def _warm_target(
    target: float,
    env_id: str,
    env_kwargs: dict[str, Any],
    held_out: bool,
    episodes: int,
    eval_episodes: int,
    eval_seed: int | None,
    max_new_tokens: int | None,
    rule: dict[str, Any],
) -> Any:
    """sft's stopping rule (agents/run/warm_target.py), or a one-line refusal. ``rule``: its
    ``every``, ``near`` and ``tolerance``; sft asks the rule after every step and the rule
    keeps its own cadence."""
    from forkgym.agents.run.config import TrainConfig
    from forkgym.agents.run.warm_target import accuracy_target

    if not held_out:
        fail("--target-accuracy validates on eval-side problems, which --all-tasks demonstrates")
    check_env(env_id, env_kwargs)

    def show(check: dict[str, float]) -> None:
        restored = " (restored: the closest to the target)" if "restored" in check else ""
        typer.echo(
            f"{check['tokens']:,} tokens: validation accuracy {check['validation_accuracy']:.3f}"
            f"{restored}",
            err=True,
        )

    try:
        return accuracy_target(
            target,
            env_id,
            env_kwargs,
            episodes=episodes,
            eval_episodes=eval_episodes,
            eval_seed=TrainConfig.eval_seed if eval_seed is None else eval_seed,
            max_new_tokens=max_new_tokens or TrainConfig.max_new_tokens,
            log=show,
            **rule,
        )
    except ValueError as exc:
        fail(str(exc))


# the options of `train` that set the config key of their name: each one's help is the key's
# own (TrainConfig's field docs), filled in by TrainCommand when the help is shown
CONFIG_OPTIONS = (
    "model",
    "env",
    "estimator",
    "algorithm",
    "loss",
    "backend",
    "steps",
    "seed",
    "out",
)
ConfigKeyOption = Annotated[str | None, typer.Option()]


def _registered(key: str) -> list[str]:
    """The names registered for the config key ``key`` (none for a key that is no part)."""
    from forkgym.agents.advantages.base import ALGORITHMS
    from forkgym.agents.advantages.estimators import ESTIMATORS
    from forkgym.agents.generation.backends.registry import BACKENDS
    from forkgym.agents.learner.losses import LOSSES

    registries = {
        "algorithm": ALGORITHMS,
        "estimator": ESTIMATORS,
        "loss": LOSSES,
        # the backends that can train (openai serves a frozen policy)
        "backend": {name: b for name, b in BACKENDS.items() if b.trainable},
    }
    return sorted(registries.get(key, ()))


def config_option_help(key: str) -> str:
    """The help of the option that sets the config key ``key``: the field's documented help,
    and for a registered part (algorithm, estimator, loss, backend) the names it may take."""
    from forkgym.agents.run.config import field_help

    text = field_help(key)
    text = f"{text[:1].upper()}{text[1:]}."
    if names := _registered(key):
        text += " Registered: " + ", ".join(f"`{name}`" for name in names) + "."
    return text


class TrainCommand(TyperCommand):
    """``forkgym train``: the options of CONFIG_OPTIONS take their help from the config's field
    docs, looked up only when the help is shown (the config imports torch, which the command
    line does not import until a command needs it)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        for param in self.params:
            if isinstance(param, TyperOption) and param.name in CONFIG_OPTIONS and not param.help:
                param.help = config_option_help(param.name)
        super().format_help(ctx, formatter)


def train(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Config overrides key=value (e.g. lr=3e-4 env_kwargs.digits=3)."),
    ] = None,
    model: ConfigKeyOption = None,
    env: ConfigKeyOption = None,
    estimator: ConfigKeyOption = None,
    algorithm: ConfigKeyOption = None,
    loss: ConfigKeyOption = None,
    backend: ConfigKeyOption = None,
    steps: Annotated[int | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    out: ConfigKeyOption = None,
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
        "loss": loss,
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
        fail(f"--model: {problem}")
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


EvalModelOption = Annotated[
    str | None,
    typer.Option(
        help="Model directory (or hub name); with --backend openai, its tokenizer. "
        "With --run: the run's latest checkpoint."
    ),
]
EvalRunOption = Annotated[
    Path | None,
    typer.Option(
        help="A training run's folder (train's --out): evaluate its latest checkpoint with "
        "its env, env kwargs, token budget and held-out settings; options given override them."
    ),
]
EpisodesOption = Annotated[
    int | None,
    typer.Option(min=1, help="Held-out tasks. [default: 200; with --run, its eval_episodes]"),
]
EvalSeedOption = Annotated[
    int | None,
    typer.Option(
        help="Seed of the held-out task stream. [default: train's eval_seed, or the run's]"
    ),
]
PassKOption = Annotated[
    int | None,
    typer.Option(
        "--pass-k",
        min=0,
        help="Also sampled pass@k (0: off). [default: 0; with --run, its eval_k]",
    ),
]
MaxNewTokensOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Token budget per assistant turn. [default: train's max_new_tokens, or the run's]",
    ),
]
EvalBackendOption = Annotated[
    str, typer.Option(help="hf (transformers), vllm (in-process) or openai (a server).")
]
BaseUrlOption = Annotated[
    str | None, typer.Option(help="--backend openai: the server, e.g. http://host:8000/v1.")
]
ServedModelOption = Annotated[
    str | None,
    typer.Option(help="--backend openai: the served model's name (default: the first)."),
]
EvalProgressOption = Annotated[
    bool,
    typer.Option("--progress/--no-progress", help="Show a progress bar (on stderr)."),
]
EvalHeldOutOption = Annotated[
    bool | None,
    typer.Option(
        "--held-out/--all-tasks",
        help="Evaluate on the eval side of the content partition (problems no training "
        "prompt or demonstration had), or on every problem. Default: held out, or as the "
        "--run was.",
    ),
]


def evaluate(
    model: EvalModelOption = None,
    env: Annotated[str | None, typer.Option(help="Environment id. With --run: the run's.")] = None,
    run: EvalRunOption = None,
    episodes: EpisodesOption = None,
    seed: EvalSeedOption = None,
    pass_k: PassKOption = None,
    max_new_tokens: MaxNewTokensOption = None,
    backend: EvalBackendOption = "hf",
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    kwarg: KwargOption = None,
    progress: EvalProgressOption = True,
    held_out: EvalHeldOutOption = None,
) -> None:
    """Greedy pass@1 (and optionally sampled pass@k) on held-out tasks; prints JSON.

    With --run, the run's own held-out evaluation of its latest checkpoint."""
    check_backend(backend, base_url, served_model)
    settings = eval_settings(
        run,
        model=model,
        env=env,
        episodes=episodes,
        seed=seed,
        pass_k=pass_k,
        max_new_tokens=max_new_tokens,
        held_out=held_out,
        kwarg=kwarg,
    )
    loaded = load_eval_model(settings.model, backend, base_url, served_model)
    with recorded_ending("eval", None):
        result = evaluate_held_out(settings, backend, loaded, show_progress=progress)
    shown = {
        **({"run": str(run)} if run is not None else {}),
        "model": settings.model,
        "env": settings.env,
        "backend": backend,
        "episodes": settings.episodes,
        "max_new_tokens": settings.max_new_tokens,
        "accuracy": result["eval_accuracy"],
    }
    typer.echo(json.dumps({**shown, **result}))


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

"""``forkgym launch``: a training run placed on a Ray cluster (the ``ray`` extra)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .train import _env_id


def launch(
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Config overrides key=value, as for `forkgym train`."),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML or TOML config file.")] = None,
    model: Annotated[str | None, typer.Option(help="Model directory (or hub name).")] = None,
    env: Annotated[str | None, typer.Option(help="Environment id.")] = None,
    steps: Annotated[int | None, typer.Option(help="Training steps.")] = None,
    out: Annotated[str | None, typer.Option(help="Run directory.")] = None,
    learners: Annotated[int, typer.Option(min=1, help="Learner ranks (one process group).")] = 1,
    generation_workers: Annotated[
        int, typer.Option(min=1, help="Generation workers, each with its own model copy.")
    ] = 1,
    verifier_replicas: Annotated[
        int, typer.Option(min=1, help="`forkgym serve` replicas (several need --db on PostgreSQL).")
    ] = 1,
    db: Annotated[
        str | None,
        typer.Option(help="The replicas' store URL (default: SQLite in the run folder)."),
    ] = None,
    verifier_workers: Annotated[
        int, typer.Option(min=1, help="Grading processes per replica process.")
    ] = 1,
    verifier_processes: Annotated[
        int, typer.Option(min=1, help="uvicorn processes per replica (`serve --processes`).")
    ] = 1,
    gpus_per_learner: Annotated[float, typer.Option(min=0)] = 0.0,
    gpus_per_generation_worker: Annotated[float, typer.Option(min=0)] = 0.0,
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster to join ('auto': the local node's); default: start one."),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")
    ] = False,
) -> None:
    """Train on a Ray cluster: verifier replicas, generation workers and learner ranks placed
    by Ray, torn down when the run ends. Prints the last step's summary."""
    from forkgym.agents.run.config import ConfigError, TrainConfig

    from .errors import checked_db, fail

    if db is not None:  # before Ray starts: a replica would fail with the same error
        checked_db(db)
    values = {"model": model, "env": _env_id(env) if env else None, "steps": steps, "out": out}
    try:
        cfg = TrainConfig.load(config, [*(overrides or []), "progress=false"], **values)
    except ConfigError as exc:
        fail(str(exc))
    try:
        from forkgym.integrations.ray import Layout
        from forkgym.integrations.ray import launch as run_launch
    except ImportError as exc:
        raise typer.BadParameter(str(exc)) from None
    layout = Layout(
        learners=learners,
        generation_workers=generation_workers,
        verifier_replicas=verifier_replicas,
        db_url=db,
        verifier_workers=verifier_workers,
        verifier_processes=verifier_processes,
        gpus_per_learner=gpus_per_learner,
        gpus_per_generation_worker=gpus_per_generation_worker,
    )
    try:
        layout.check()
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    last = run_launch(cfg, layout, address=address, resume=resume)
    summary = {k: last.get(k) for k in ("reward_mean", "accuracy", "eval_accuracy") if k in last}
    typer.echo(json.dumps({"run": cfg.out, **summary}))

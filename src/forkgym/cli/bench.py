"""``forkgym bench``: methods x seeds at one budget of generated tokens, with a report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def bench(
    preset: Annotated[
        str,
        typer.Option(
            help="smoke (CI), quick (about 31 min on 2 cores), boundary (group, critic and Monte Carlo advantages at K = 1 and 8) or full."
        ),
    ] = "quick",
    out: Annotated[
        Path | None,
        typer.Option(help="Report folder (default runs/bench-PRESET); rerun to resume."),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated methods (default: the preset's); NAME@REDUCTION overrides a reduction."
        ),
    ] = None,
    regimes: Annotated[
        str | None,
        typer.Option(help="Comma-separated regimes of the preset (default: all of them)."),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(min=1, help="Generated tokens per run, instead of each regime's budget."),
    ] = None,
    seeds: Annotated[
        str | None, typer.Option(help="Comma-separated seeds (default: the preset's).")
    ] = None,
    report_only: Annotated[
        bool,
        typer.Option("--report-only", help="Rewrite the report from the finished runs in --out."),
    ] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Then check the folder: every run complete and within one step of the budget, "
            "the report's sections and plots readable; exit 1 otherwise.",
        ),
    ] = False,
    list_: Annotated[
        bool, typer.Option("--list", help="List the methods and presets, then exit.")
    ] = False,
) -> None:
    """Compare training methods at the same budget of generated tokens: every method x seed of
    a preset from one warm start, then report.md (accuracy with 95% intervals over seeds,
    tokens generated and trained on, time, group types, failures) and PNG plots. Interrupted?
    Run the same command again: finished runs are kept, an unfinished one resumes."""
    from forkgym.bench import METHODS, PRESETS, resolve_method, run_bench, write_report
    from forkgym.bench.presets import narrow

    if list_:
        for name, method in METHODS.items():
            typer.echo(f"{name:16} {method.about}")
        typer.echo("")
        for name, p in PRESETS.items():
            regimes = ", ".join(f"{r.name} ({len(r.methods)} methods)" for r in p.regimes)
            typer.echo(f"preset {name:7} seeds {list(p.seeds)}: {regimes}")
        return
    if preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; one of {sorted(PRESETS)}", param_hint="--preset")  # fmt: skip
    chosen = _split(methods)
    for name in chosen or []:
        try:
            resolve_method(name)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--methods") from None
    try:
        seed_list = [int(s) for s in _split(seeds) or []] or None
    except ValueError:
        raise typer.BadParameter(f"seeds must be integers, got {seeds!r}", param_hint="--seeds") from None  # fmt: skip
    try:
        chosen_preset = narrow(PRESETS[preset], _split(regimes), budget, seed_list)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--regimes") from None
    folder = out or Path(f"runs/bench-{preset}")
    given = {"--methods": methods, "--regimes": regimes, "--budget": budget, "--seeds": seeds}
    command = " ".join(
        ["forkgym bench", f"--preset {preset}"]
        + [f"{flag} {value}" for flag, value in given.items() if value is not None]
        + [f"--out {folder}"]
    )
    if report_only:
        if not (folder / "bench.json").exists():
            raise typer.BadParameter(f"{folder} holds no benchmark", param_hint="--out")
        path = write_report(folder, chosen_preset, command=command)
    else:
        try:
            path = run_bench(chosen_preset, folder, methods=chosen, command=command)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    typer.echo(f"wrote {path}")
    if check:
        from forkgym.bench.report import check_report

        problems = check_report(folder, chosen_preset, chosen)
        for problem in problems:
            typer.echo(f"check: {problem}", err=True)
        if problems:
            raise typer.Exit(1)
        typer.echo(f"check: {folder} is complete and within budget")

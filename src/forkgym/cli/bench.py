"""``forkgym bench``: methods x seeds at one budget of generated tokens, with a report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from forkgym.bench import Preset


def _split(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


PresetOption = Annotated[
    str,
    typer.Option(
        help="smoke (CI), quick (about 31 min on 2 cores), boundary (group, critic and Monte Carlo advantages at K = 1 and 8) or full."
    ),
]
OutOption = Annotated[
    Path | None,
    typer.Option(help="Report folder (default runs/bench-PRESET); rerun to resume."),
]
MethodsOption = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated methods (default: the preset's); NAME@REDUCTION overrides a reduction."
    ),
]
RegimesOption = Annotated[
    str | None,
    typer.Option(help="Comma-separated regimes of the preset (default: all of them)."),
]
BudgetOption = Annotated[
    int | None,
    typer.Option(min=1, help="Generated tokens per run, instead of each regime's budget."),
]
SeedsOption = Annotated[
    str | None, typer.Option(help="Comma-separated seeds (default: the preset's).")
]
ReportOnlyOption = Annotated[
    bool,
    typer.Option("--report-only", help="Rewrite the report from the finished runs in --out."),
]
CheckOption = Annotated[
    bool,
    typer.Option(
        "--check",
        help="Then check the folder: every run complete and within one step of the budget, "
        "the report's sections and plots readable; exit 1 otherwise.",
    ),
]
ListOption = Annotated[
    bool, typer.Option("--list", help="List the methods and presets, then exit.")
]
JobsOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="Run a regime's runs (its sweeps' grids, then its reported runs) in this many processes, the threads split between them (a stopped run resumes with any number).",
    ),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Run the sweeps' grids and the reported runs as tasks on this Ray cluster (auto, HOST:PORT or ray://HOST:10001), one CPU each; forkgym on every node and --out on storage they all see.",
    ),
]
PlanOption = Annotated[
    float | None,
    typer.Option(
        "--plan",
        min=0.001,
        max=1.0,
        help="Read the finished runs in --out as a pilot and print the seeds per method a minimum detectable difference of this size needs and whether each regime's budget is at the plateau, then exit.",
    ),
]


def bench(
    preset: PresetOption = "quick",
    out: OutOption = None,
    methods: MethodsOption = None,
    regimes: RegimesOption = None,
    budget: BudgetOption = None,
    seeds: SeedsOption = None,
    report_only: ReportOnlyOption = False,
    check: CheckOption = False,
    list_: ListOption = False,
    plan: PlanOption = None,
    jobs: JobsOption = 1,
    ray: RayOption = None,
) -> None:
    """Compare training methods at the same budget of generated tokens: every method x seed of
    a preset from one warm start, then report.md (accuracy with 95% intervals over seeds,
    tokens generated and trained on, time, group types, failures) and PNG plots. Interrupted?
    Run the same command again: finished runs are kept, an unfinished one resumes."""
    if list_:
        _print_catalogue()
        return
    chosen_preset, chosen = _chosen(preset, methods, regimes, budget, seeds)
    folder = out or Path(f"runs/bench-{preset}")
    given = {"--methods": methods, "--regimes": regimes, "--budget": budget, "--seeds": seeds}
    command = _command_line(preset, given, folder)
    if plan is not None:
        from forkgym.bench.report import plan_lines

        if not (folder / "bench.json").exists():
            raise typer.BadParameter(f"{folder} holds no benchmark to plan from", param_hint="--out")  # fmt: skip
        typer.echo("\n".join(plan_lines(folder, chosen_preset, plan)))
        return
    if report_only:
        path = _rewrite_report(folder, chosen_preset, command)
    else:
        path = _run(chosen_preset, folder, chosen, command, jobs, ray)
    typer.echo(f"wrote {path}")
    if check:
        _check(folder, chosen_preset, chosen)


def _print_catalogue() -> None:
    """``--list``: every method with what it is, then every preset's seeds and regimes."""
    from forkgym.bench import METHODS, PRESETS

    for name, method in METHODS.items():
        typer.echo(f"{name:16} {method.about}")
    typer.echo("")
    for name, p in PRESETS.items():
        regimes = ", ".join(f"{r.name} ({len(r.methods)} methods)" for r in p.regimes)
        typer.echo(f"preset {name:7} seeds {list(p.seeds)}: {regimes}")


def _chosen(
    preset: str, methods: str | None, regimes: str | None, budget: int | None, seeds: str | None
) -> tuple[Preset, list[str] | None]:
    """The preset named ``preset`` narrowed to the regimes, budget and seeds given, and the
    methods given (None: the preset's); a name or number that is not known is a usage error."""
    from forkgym.bench import PRESETS, resolve_method
    from forkgym.bench.presets import narrow

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
        return narrow(PRESETS[preset], _split(regimes), budget, seed_list), chosen
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--regimes") from None


def _command_line(preset: str, given: dict[str, object], folder: Path) -> str:
    """The ``forkgym bench`` command that reruns (resumes) this benchmark, for the report."""
    return " ".join(
        ["forkgym bench", f"--preset {preset}"]
        + [f"{flag} {value}" for flag, value in given.items() if value is not None]
        + [f"--out {folder}"]
    )


def _rewrite_report(folder: Path, preset: Preset, command: str) -> Path:
    """``--report-only``: the report of the finished runs in ``folder``, written again."""
    from forkgym.bench import write_report

    if not (folder / "bench.json").exists():
        raise typer.BadParameter(f"{folder} holds no benchmark", param_hint="--out")
    return write_report(folder, preset, command=command)


def _run(preset: Preset, folder: Path, methods: list[str] | None, command: str, jobs: int = 1, ray: str | None = None) -> Path:  # fmt: skip
    """Run (or resume) the benchmark in ``folder``; a matrix it refuses is a usage error."""
    from forkgym.bench import run_bench

    if ray is not None:
        try:
            import forkgym.bench.ray_cells  # noqa: F401 - Ray present?
        except ImportError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ray") from None
    try:
        return run_bench(preset, folder, methods=methods, command=command, jobs=jobs, ray_address=ray)  # fmt: skip
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _check(folder: Path, preset: Preset, methods: list[str] | None) -> None:
    """``--check``: say what is missing or over budget in ``folder``, and exit 1 if anything is."""
    from forkgym.bench.report import check_report

    problems = check_report(folder, preset, methods)
    for problem in problems:
        typer.echo(f"check: {problem}", err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo(f"check: {folder} is complete and within budget")

"""``forkgym verify``: grade one answer or a JSONL file of answers."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from importlib.resources import files
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

if TYPE_CHECKING:
    from forkgym.verifiers import MathVerifier

SAMPLE_ANSWERS = "data/sample_answers.jsonl"
MAX_REPORTED_INPUT_ERRORS = 10


class InputError(ValueError):
    """A JSONL input file has rows that cannot be graded; carries every problem found."""


def _read_rows(path: Path) -> Iterator[tuple[int, bytes]]:
    """Non-blank lines with their 1-based line numbers, undecoded (decoding is validation)."""
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, raw


def _parse_row(lineno: int, raw: bytes) -> dict[str, Any]:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"line {lineno}: not valid UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"line {lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise InputError(f"line {lineno}: expected a JSON object, got {type(row).__name__}")
    for key in ("reference", "response"):
        if key not in row:
            raise InputError(f"line {lineno}: missing {key!r}")
    # datasets store numeric answers as numbers (GSM8K-style "answer": 72): accept them
    ref = row["reference"]
    if isinstance(ref, (int, float)) and not isinstance(ref, bool) and math.isfinite(ref):
        row["reference"] = str(ref)
    for key in ("reference", "response"):
        if not isinstance(row[key], str):
            expected = "a string or a number" if key == "reference" else "a string"
            raise InputError(
                f"line {lineno}: {key!r} must be {expected}, got {type(row[key]).__name__}"
            )
    if "id" in row and not isinstance(row["id"], (str, int)):
        raise InputError(f"line {lineno}: 'id' must be a string or an integer")
    return row


def validate_jsonl(path: Path) -> int:
    """Check every row before grading anything; returns the row count or raises InputError."""
    problems: list[str] = []
    count = 0
    for lineno, raw in _read_rows(path):
        count += 1
        try:
            _parse_row(lineno, raw)
        except InputError as exc:
            problems.append(str(exc))
    if problems:
        shown = problems[:MAX_REPORTED_INPUT_ERRORS]
        more = len(problems) - len(shown)
        tail = f"\n... and {more} more" if more else ""
        raise InputError(f"{len(problems)} malformed row(s) in {path}:\n" + "\n".join(shown) + tail)
    return count


def _output_row(row: dict[str, Any], outcome: Any) -> dict[str, Any]:
    out = dict(row)
    out.update(
        status=outcome.status.value,
        reward=outcome.reward,
        extracted=outcome.extracted,
        latency_ms=round(outcome.latency_ms, 3),
        details=outcome.details,
    )
    return out


def _status_table(counts: Counter[str], rewards: list[float], elapsed: float, title: str) -> Table:
    from forkgym.verifiers import Status

    total = sum(counts.values())
    table = Table(title=title)
    table.add_column("status")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    table.add_column("kind")
    for status in Status:
        n = counts.get(status.value, 0)
        kind = "infrastructure (no reward)" if status.is_infrastructure else "policy"
        table.add_row(status.value, str(n), f"{n / total:.1%}" if total else "-", kind)
    mean = f"{sum(rewards) / len(rewards):.3f} over {len(rewards)}" if rewards else "n/a"
    rate = f"{total / elapsed:,.0f}/s" if elapsed > 0 else "-"
    table.caption = f"{total} graded in {elapsed:.2f} s ({rate}); mean reward {mean} rewarded items"
    return table


@contextmanager
def jsonl_sink(out_path: Path | None) -> Iterator[TextIO | None]:
    """Where graded rows go: nowhere, stdout (``-``), or a file that appears only when complete.

    Rows are written to a temporary file beside the target and renamed into place at the end,
    so an interrupted run never leaves a truncated file that looks finished.
    """
    if out_path is None:
        yield None
        return
    if str(out_path) == "-":
        yield sys.stdout
        return
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out_path.name}.", dir=out_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
        os.replace(tmp_name, out_path)
    except BaseException:
        os.unlink(tmp_name)
        raise


def grade_file(
    verifier: Any,
    in_path: Path,
    out_path: Path | None,
    batch_size: int,
    show_progress: bool,
    console: Console,
) -> tuple[Counter[str], list[float], float]:
    """Validate, then grade a JSONL file in batches, keeping the input order in the output."""
    total = validate_jsonl(in_path)
    counts: Counter[str] = Counter()
    rewards: list[float] = []
    start = time.perf_counter()
    progress = Progress(
        TextColumn("grading"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not show_progress,
    )
    with jsonl_sink(out_path) as sink, progress:
        task = progress.add_task("grading", total=total)
        rows = (_parse_row(n, raw) for n, raw in _read_rows(in_path))
        while batch := list(islice(rows, batch_size)):
            outcomes = verifier.verify_many([(r["reference"], r["response"]) for r in batch])
            for row, outcome in zip(batch, outcomes, strict=True):
                counts[outcome.status.value] += 1
                if outcome.reward is not None:
                    rewards.append(outcome.reward)
                if sink is not None:
                    sink.write(json.dumps(_output_row(row, outcome)) + "\n")
            progress.advance(task, len(batch))
    return counts, rewards, time.perf_counter() - start


def _show(text: str) -> str:
    """A text in quotes, as written (a LaTeX backslash stays one backslash)."""
    return "'" + text.replace("\n", "\\n") + "'"


def _answer_words(answer: str | None, items: list[str] | None, plain: bool) -> str:
    if answer is None:
        return "nothing"
    kind = f"a list of {len(items)}" if items else ("plain text" if plain else "math")
    return f"{_show(answer)} ({kind})"


def format_explanation(report: dict[str, Any]) -> str:
    """``forkgym verify --explain``: the stages of one verification as lines of text."""
    ref, resp, outcome = report["reference"], report["response"], report["outcome"]
    chain = ", ".join(report["strategies"])
    if report["preset"]:
        chain += f" (preset {report['preset']})"
    if report["after_think"]:
        chain += "; only the text after </think>"
    lines = []
    if "parts" in ref:
        lines.append(
            f"reference   {len(ref['parts'])} parts: {', '.join(map(_show, ref['parts']))}"
        )
    else:
        words = _answer_words(ref["answer"], ref["items"], ref["plain"])
        note = f"; {ref['note'].replace('_', ' ')}, graded on its content" if ref["note"] else ""
        lines.append(f"reference   {words}{note}")
        if ref["parsed_as"] is not None:
            lines.append(f"            math-verify parses {_show(ref['parsed_as'])}")
    lines.append(f"strategies  {chain}; multi_box={report['multi_box']}")
    if resp["no_answer_because"]:
        why = resp["no_answer_because"].replace("_", " ")
        lines.append(f"            none ran: {why} (a cut-off answer is never graded)")
    width = max((len(a["strategy"]) for a in resp["attempts"]), default=0)
    for attempt in resp["attempts"]:
        found = "nothing" if attempt["found"] is None else _show(attempt["found"])
        at = f" at {attempt['span']}" if attempt["span"] else ""
        mark = "  <- graded" if attempt["chosen"] else ""
        lines.append(f"  {attempt['strategy']:{width}}  {found}{at}{mark}")
    answer = resp["answer"]
    words = _answer_words(answer, resp["items"], resp["plain"]) if answer else "none"
    lines.append(f"answer      {words}")
    if resp["parsed_as"] is not None:
        lines.append(f"            math-verify parses {_show(resp['parsed_as'])}")
    reward = "none" if outcome["reward"] is None else f"{outcome['reward']:g}"
    details = outcome["details"]
    how = details.get("reason") or details.get("path", "extraction")
    lines.append(f"verdict     {outcome['status']}  reward={reward}  ({how})")
    return "\n".join(lines)


ReferenceOption = Annotated[
    str | None, typer.Option("--reference", "-r", help="Reference answer (LaTeX or plain).")
]
ResponseOption = Annotated[
    str | None,
    typer.Option(
        "--response", "-s", help="Model response to grade; its last \\boxed{} is the answer."
    ),
]
InputOption = Annotated[
    Path | None,
    typer.Option(
        "--input",
        "-i",
        help="JSONL file with rows {reference, response, id?}.",
        exists=True,
        dir_okay=False,
    ),
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Where to write graded JSONL rows ('-' for stdout)."),
]
SampleOption = Annotated[
    bool, typer.Option("--sample", help="Grade the bundled sample of answers.")
]
TimeoutOption = Annotated[
    float, typer.Option(help="Hard wall-clock limit per symbolic verification, seconds.")
]
WorkersOption = Annotated[
    int | None,
    typer.Option(help="Worker processes (default: CPU count; 0 = in-process, no hard limit)."),
]
ExtractOption = Annotated[
    list[str],
    typer.Option(
        help="Extraction strategy or regex, repeatable: boxed, gsm8k, answer_tag, "
        "answer_is, minerva, last_number."
    ),
]
PresetOption = Annotated[
    str | None,
    typer.Option(
        help="A named extraction chain instead of --extract: math, gsm8k, minerva, r1, "
        "lenient (see docs/verifier.md)."
    ),
]
MultiBoxOption = Annotated[
    str,
    typer.Option(
        help="Several \\boxed{}: 'list' (one list answer, compared as a set unless a "
        "tuple), 'parts' (each reference box a part, in order), 'last' (the last box)."
    ),
]
ExplainOption = Annotated[
    bool,
    typer.Option(
        "--explain",
        help="With --reference/--response: show what each extraction strategy found, "
        "what was graded and how.",
    ),
]
BatchSizeOption = Annotated[int, typer.Option(min=1, help="Rows graded per batch in file mode.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the single outcome as JSON.")]
ProgressOption = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show a progress bar in file mode.")
]


def verify(
    reference: ReferenceOption = None,
    response: ResponseOption = None,
    input: InputOption = None,
    output: OutputOption = None,
    sample: SampleOption = False,
    timeout: TimeoutOption = 5.0,
    workers: WorkersOption = None,
    extract: ExtractOption = ["boxed"],  # noqa: B006
    preset: PresetOption = None,
    multi_box: MultiBoxOption = "list",
    explain: ExplainOption = False,
    batch_size: BatchSizeOption = 256,
    as_json: JsonOption = False,
    progress: ProgressOption = True,
) -> None:
    """Grade one answer (--reference/--response) or a JSONL file (--input/--output).

    Each output row repeats the input row and adds status, reward, extracted, latency_ms and
    details. Statuses: correct, incorrect, invalid (no answer found or unparseable), truncated,
    timeout and error (infrastructure: reward null, never a wrong answer).
    """
    single = _check_modes(reference, response, input, output, sample, explain)
    verifier = _make_verifier(timeout, workers, extract, preset, multi_box)
    with closing(verifier):  # the pool starts only if a symbolic answer needs it
        if single:
            _grade_one(verifier, reference, response, explain=explain, as_json=as_json)  # type: ignore[arg-type]
        else:
            in_path = _sample_path() if sample else input
            _grade_jsonl(verifier, in_path, output, batch_size, progress)  # type: ignore[arg-type]


def _check_modes(
    reference: str | None,
    response: str | None,
    input: Path | None,
    output: Path | None,
    sample: bool,
    explain: bool,
) -> bool:
    """Refuse options that do not go together; whether one answer is graded (not a file)."""
    single = reference is not None or response is not None
    modes = int(single) + int(input is not None) + int(sample)
    if modes != 1:
        raise typer.BadParameter("give exactly one of --reference/--response, --input or --sample")
    if single and (reference is None or response is None):
        raise typer.BadParameter("--reference and --response go together")
    if input is not None and output is None:
        raise typer.BadParameter("--input needs --output (a path, or '-' for stdout)")
    if explain and not single:
        raise typer.BadParameter("--explain grades one answer: give --reference and --response")
    return single


def _make_verifier(
    timeout: float, workers: int | None, extract: list[str], preset: str | None, multi_box: str
) -> MathVerifier:
    """The verifier the options describe; a usage error for an option it refuses."""
    from forkgym.verifiers import MathVerifier

    try:
        return MathVerifier(
            timeout=timeout, workers=workers, extract=extract, preset=preset, multi_box=multi_box
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _sample_path() -> Path:
    """The bundled sample of answers (``--sample``)."""
    return Path(str(files("forkgym.verifiers") / SAMPLE_ANSWERS))


def _outcome_line(outcome: Any) -> str:
    """One graded answer as a line: status, reward, what was extracted, time and path."""
    reward = "none" if outcome.reward is None else f"{outcome.reward:g}"
    return (
        f"{outcome.status.value}  reward={reward}  extracted={outcome.extracted!r}  "
        f"({outcome.latency_ms:.1f} ms, {outcome.details.get('path', 'extraction')})"
    )


def _grade_one(
    verifier: MathVerifier, reference: str, response: str, *, explain: bool, as_json: bool
) -> None:
    """Grade one answer and print the outcome (or, with ``explain``, how it was reached)."""
    if explain:
        report = verifier.explain(reference, response)
        typer.echo(json.dumps(report) if as_json else format_explanation(report))
        return
    outcome = verifier.verify(reference, response)
    typer.echo(json.dumps(outcome.to_dict()) if as_json else _outcome_line(outcome))


def _grade_jsonl(
    verifier: MathVerifier, in_path: Path, output: Path | None, batch_size: int, show_progress: bool
) -> None:
    """Grade a JSONL file and print the status table (on stderr when the rows go to stdout);
    malformed rows are a usage error, and nothing is graded."""
    console = Console(stderr=output is not None and str(output) == "-")
    try:
        counts, rewards, elapsed = grade_file(
            verifier, in_path, output, batch_size, show_progress, console
        )
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    console.print(_status_table(counts, rewards, elapsed, title=f"forkgym verify: {in_path.name}"))
    if output is not None and str(output) != "-":
        console.print(f"wrote {sum(counts.values())} rows to {output}")

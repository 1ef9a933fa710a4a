"""``forkgym serve`` and ``forkgym outcomes``: run the verifier service, query its store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from forkgym.services.config import ServiceConfig

console = Console(highlight=False)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL of the store (default: sqlite under $FORKGYM_DATA_DIR)."
    ),
]


HostOption = Annotated[str, typer.Option(help="Interface to bind (loopback by default).")]
PortOption = Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")]
WorkersOption = Annotated[
    int | None, typer.Option(help="Verification worker processes (default: CPU count).")
]
ProcessesOption = Annotated[
    int,
    typer.Option(
        min=1,
        help="uvicorn processes on the one port, each with its own --workers and store writer.",
    ),
]
TimeoutOption = Annotated[
    float, typer.Option(help="Hard wall-clock limit per symbolic verification, seconds.")
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        help="Bearer token for every route but /healthz (default: $FORKGYM_TOKEN).",
        envvar="FORKGYM_TOKEN",
    ),
]
MaxBatchOption = Annotated[int, typer.Option(help="Most items in one batch request.")]
MaxBodyOption = Annotated[float, typer.Option(help="Largest request body, MiB (413 beyond).")]
MaxResponseOption = Annotated[int, typer.Option(help="Longest response text (422 beyond).")]
StoreResponsesOption = Annotated[
    bool,
    typer.Option(
        "--store-responses/--hash-responses-only",
        help="Keep response texts, or only their SHA-256 and size.",
    ),
]
SynchronousOption = Annotated[
    str,
    typer.Option(
        help="SQLite synchronous mode: NORMAL survives a killed process, FULL also power loss."
    ),
]
RequestBudgetOption = Annotated[
    float,
    typer.Option(
        help="Grading seconds one request may use; its unfinished items come back timeout (0: no budget)."
    ),
]
TimeoutMemoryOption = Annotated[
    float,
    typer.Option(help="Seconds a timed-out answer is remembered and answered at once (0: off)."),
]
PreemptAfterOption = Annotated[
    float,
    typer.Option(
        help="Seconds an item runs before a request kept waiting by a busier caller may stop "
        "it and take its worker; the item runs again later with its full limit (0: never)."
    ),
]
PublicDocsOption = Annotated[
    bool,
    typer.Option(help="With --token: serve /docs, /redoc and /openapi.json without it."),
]
NullRewardOption = Annotated[
    str,
    typer.Option(
        help="What /get_reward (OpenRLHF's shape) answers for a timeout or error: a number, "
        "or 'fail' to answer 503."
    ),
]
LogLevelOption = Annotated[str, typer.Option(help="uvicorn log level.")]


def serve(
    db: DbOption = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    workers: WorkersOption = None,
    processes: ProcessesOption = 1,
    timeout: TimeoutOption = 5.0,
    token: TokenOption = None,
    max_batch: MaxBatchOption = 1024,
    max_body_mb: MaxBodyOption = 16.0,
    max_response_chars: MaxResponseOption = 262_144,
    store_responses: StoreResponsesOption = True,
    synchronous: SynchronousOption = "NORMAL",
    request_budget: RequestBudgetOption = 30.0,
    timeout_memory: TimeoutMemoryOption = 600.0,
    preempt_after: PreemptAfterOption = 0.5,
    public_docs: PublicDocsOption = False,
    null_reward: NullRewardOption = "0.0",
    log_level: LogLevelOption = "warning",
) -> None:
    """Serve the verifier over HTTP; prints the address once ready; Ctrl-C stops it cleanly."""
    config = _service_config(
        db=db,
        host=host,
        port=port,
        workers=workers,
        timeout=timeout,
        token=token,
        max_batch=max_batch,
        max_body_mb=max_body_mb,
        max_response_chars=max_response_chars,
        store_responses=store_responses,
        synchronous=synchronous,
        request_budget=request_budget,
        timeout_memory=timeout_memory,
        preempt_after=preempt_after,
        public_docs=public_docs,
        null_reward=null_reward,
    )
    _listen(config, log_level=log_level, processes=processes)


def _null_reward(text: str) -> float | None:
    """``--null-reward``: a number, or None for 'fail'."""
    try:
        return None if text.strip().lower() == "fail" else float(text)
    except ValueError:
        raise typer.BadParameter(f"--null-reward must be a number or 'fail', got {text!r}") from None  # fmt: skip


def _service_config(
    *,
    db: str | None,
    host: str,
    port: int,
    workers: int | None,
    timeout: float,
    token: str | None,
    max_batch: int,
    max_body_mb: float,
    max_response_chars: int,
    store_responses: bool,
    synchronous: str,
    request_budget: float,
    timeout_memory: float,
    preempt_after: float,
    public_docs: bool,
    null_reward: str,
) -> ServiceConfig:
    """The service's settings from ``serve``'s options (in their units); a value the settings
    refuse is a usage error."""
    import os

    from forkgym.services.config import ServiceConfig

    from .errors import checked_db

    null = _null_reward(null_reward)
    try:
        return ServiceConfig(
            db_url=checked_db(db),
            host=host,
            port=port,
            workers=workers or os.cpu_count() or 1,
            timeout=timeout,
            token=token,
            max_batch=max_batch,
            max_body_bytes=int(max_body_mb * 2**20),
            max_response_chars=max_response_chars,
            store_responses=store_responses,
            synchronous=synchronous,
            public_docs=public_docs,
            request_budget_s=request_budget or None,
            timeout_memory_s=timeout_memory,
            preempt_after_s=preempt_after or None,
            null_reward=null,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _listen(config: ServiceConfig, *, log_level: str, processes: int) -> None:
    """Run the service until it is stopped; an address it cannot bind ends it with exit 1."""
    from forkgym.services.server import serve as run_server

    try:
        run_server(config, log_level=log_level, processes=processes)
    except OSError as exc:
        typer.echo(f"error: cannot listen on {config.host}:{config.port}: {exc}", err=True)
        raise typer.Exit(code=1) from None


def outcomes(
    db: DbOption = None,
    run_id: Annotated[str | None, typer.Option(help="Only this run.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status (for --export).")] = None,
    slowest_n: Annotated[int, typer.Option("--slowest", help="Show the N slowest items.")] = 0,
    export: Annotated[
        Path | None, typer.Option(help="Write the outcomes as JSONL here ('-' for stdout).")
    ] = None,
) -> None:
    """Status counts and latency percentiles of the store; optionally the slowest items or a JSONL export."""
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from forkgym.store import (
        latency_percentiles,
        make_engine,
        slowest,
        status_counts,
        write_jsonl,
    )

    from .errors import checked_db, fail

    url = make_url(checked_db(db))
    shown = url.render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") and not Path(url.database).exists():  # fmt: skip
        fail(f"no outcome store at {shown} (no such file; run `forkgym serve` first)")
    engine = make_engine(url.render_as_string(hide_password=False))
    try:
        tables = inspect(engine).get_table_names()
    except SQLAlchemyError as exc:
        fail(f"cannot read the store at {shown}: {str(exc).splitlines()[0]}")
    if "verification_outcomes" not in tables:
        fail(f"no outcome store at {shown} (run `forkgym serve` first)")
    with engine.connect() as conn:
        if export is not None:
            if str(export) == "-":
                n = write_jsonl(conn, sys.stdout, run_id=run_id, status=status)
            else:
                with export.open("w", encoding="utf-8") as fh:
                    n = write_jsonl(conn, fh, run_id=run_id, status=status)
            typer.echo(f"exported {n} outcomes", err=True)
            return
        counts = status_counts(conn, run_id=run_id)
        latency = latency_percentiles(conn, run_id=run_id)
        total = sum(counts.values())
        table = Table(title=f"outcomes{f' of run {run_id}' if run_id else ''}: {total}")
        table.add_column("status")
        table.add_column("count", justify="right")
        table.add_column("share", justify="right")
        for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
            table.add_row(name, str(n), f"{n / total:.1%}")
        table.caption = "latency ms: " + ", ".join(
            f"{k} {v:.1f}" if v is not None else f"{k} -" for k, v in latency.items()
        )
        console.print(table)
        if slowest_n:
            slow = Table(title=f"{slowest_n} slowest")
            for column in ("id", "status", "latency ms", "extracted"):
                slow.add_column(column)
            for row in slowest(conn, slowest_n, run_id=run_id):
                slow.add_row(
                    row["id"],
                    row["status"],
                    f"{row['latency_ms']:.1f}",
                    (row["extracted"] or "")[:40],
                )
            console.print(slow)
    engine.dispose()


sandbox_app = typer.Typer(
    help="The Python tool's sandbox as an HTTP service.", no_args_is_help=True
)


@sandbox_app.command("serve")
def sandbox_serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: a free one).")] = 8080,
    concurrency: Annotated[int, typer.Option(min=1, help="Programs run at once.")] = 2,
    cpu_seconds: Annotated[int, typer.Option(min=1, help="CPU seconds per program.")] = 2,
    wall_seconds: Annotated[
        float, typer.Option(help="Most wall-clock seconds per program.")
    ] = 10.0,
    memory_mb: Annotated[int, typer.Option(min=16, help="Address space per program, MiB.")] = 512,
) -> None:
    """Serve POST /run_code (SandboxFusion's request shape) over the OS sandbox; prints the
    address once ready."""
    import uvicorn

    from forkgym.envs.sandbox import SandboxLimits
    from forkgym.envs.sandbox.isolation import SandboxUnavailable
    from forkgym.services.sandbox_app import create_sandbox_app
    from forkgym.services.server import bind

    limits = SandboxLimits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds, memory_mb=memory_mb)
    try:
        app = create_sandbox_app(limits, concurrency=concurrency)
    except SandboxUnavailable as exc:
        raise typer.BadParameter(str(exc)) from None
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    original = server.startup

    async def startup(sockets=None):  # type: ignore[no-untyped-def]
        await original(sockets=sockets)
        print(f"forkgym sandbox listening on http://{bound_host}:{bound_port}", flush=True)

    server.startup = startup  # type: ignore[method-assign]
    server.run(sockets=[sock])

"""How a long command ends, said once: on the terminal in one line and in the run's folder.

``train`` and ``eval`` run for minutes and hold a generation engine (a vLLM engine may be a
process of its own, with a GPU's memory). Whatever ends them, the code that closes the engine
must run and the user must learn why it stopped:

* a normal end: ``ended.json`` says ``completed``;
* an exception anywhere (the reward, the loss, a checkpoint): one line on stderr, the whole
  traceback in ``error.log`` beside ``ended.json`` (``failed``, with that line), exit code 1;
* Ctrl-C (SIGINT): ``interrupted``, exit code 130;
* SIGTERM (a scheduler, ``kill``): turned into an exception so that ``finally`` blocks and
  context managers run as for Ctrl-C: ``terminated``, exit code 143.

SIGKILL cannot be caught: an engine in a process of its own may then outlive the command.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import tempfile
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import typer

__all__ = ["Terminated", "recorded_ending"]


class Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, like KeyboardInterrupt: ``except
    Exception`` in the run does not swallow it)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated(signum)


def _record(folder: Path, status: str, reason: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "status": status,
        "reason": reason,
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "pid": os.getpid(),
    }
    (folder / "ended.json").write_text(json.dumps(record) + "\n")


@contextmanager
def recorded_ending(command: str, run_dir: str | Path | None) -> Iterator[None]:
    """Run the body; record how it ended in ``run_dir`` (None: the traceback of a failure goes
    to a file in the temporary directory, and nothing else is written). Under ``torchrun``
    only rank 0 records; every rank writes its own traceback."""
    rank = int(os.environ.get("RANK", "0"))
    folder = Path(run_dir) if run_dir is not None else None
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None

    def record(status: str, reason: str | None = None) -> None:
        if folder is not None and rank == 0:
            _record(folder, status, reason)

    try:
        yield
    except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
        raise  # the command's own usage errors, already one line
    except KeyboardInterrupt:
        record("interrupted", "SIGINT (Ctrl-C)")
        typer.echo(f"forkgym {command}: interrupted (SIGINT)", err=True)
        raise SystemExit(130) from None
    except Terminated:
        record("terminated", "SIGTERM")
        typer.echo(f"forkgym {command}: terminated (SIGTERM)", err=True)
        raise SystemExit(128 + signal.SIGTERM) from None
    except Exception as exc:
        line = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
        name = "error.log" if rank == 0 else f"error.rank{rank}.log"
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            log = folder / name
        else:
            log = Path(tempfile.gettempdir()) / f"forkgym-{command}-{os.getpid()}.log"
        log.write_text(traceback.format_exc())
        record("failed", line)
        typer.echo(f"forkgym {command}: failed: {line} (traceback: {log})", err=True)
        raise SystemExit(1) from None
    else:
        record("completed")
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)

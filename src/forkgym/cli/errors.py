"""One-line errors for the commands: what is wrong and what to do, no traceback."""

from __future__ import annotations

from typing import NoReturn

import typer


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (2: a usage error)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def checked_db(url: str | None) -> str:
    """``url`` (default: the SQLite store under $FORKGYM_DATA_DIR) once it is known to work:
    a URL of a known dialect whose driver is installed, a SQLite path that can exist, a server
    that answers; otherwise one line saying which (see ``forkgym.store.check_url``)."""
    from forkgym.store import StoreURLError, check_url, default_url

    url = url or default_url()
    try:
        check_url(url)
    except StoreURLError as exc:
        fail(f"--db: {exc}")
    return url

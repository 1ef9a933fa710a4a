"""Durable records of verification outcomes, runs and metrics (SQLite through SQLAlchemy)."""

if __name__ != "forkgym.store":  # imported as a top-level `store` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.store; install forkgym "
        "(`pip install -e .`) and import forkgym.store instead of `store`"
    )

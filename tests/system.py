"""Hiding a system command from a process, to prove the rest works on a machine without it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def path_without(command: str, workdir: Path, path: str | None = None) -> str:
    """A ``PATH`` on which ``command`` is not found and everything else still is: each directory
    that holds ``command`` is replaced by a directory of links to its other entries."""
    folders = []
    for i, folder in enumerate((path or os.environ.get("PATH", "")).split(os.pathsep)):
        if not folder or not (Path(folder) / command).exists():
            folders.append(folder)
            continue
        shadow = workdir / f"path-{i}"
        shadow.mkdir(parents=True, exist_ok=True)
        for entry in Path(folder).iterdir():
            if entry.name != command and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
        folders.append(str(shadow))
    hidden = os.pathsep.join(folders)
    assert shutil.which(command, path=hidden) is None
    return hidden


# the registered environments that run model code in the OS sandbox
SANDBOXED_ENVS = frozenset({"forkgym/PythonTool-v0"})


def env_params(env_ids: list[str]) -> list:
    """``env_ids`` for ``parametrize``, those that need the sandbox marked ``sandbox``."""
    import pytest

    return [
        pytest.param(e, marks=pytest.mark.sandbox) if e in SANDBOXED_ENVS else e for e in env_ids
    ]

"""envs/sandbox/isolation.py: what the sandbox is built from, and a clear refusal where it cannot be."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

import pytest

from forkgym.envs.sandbox import isolation


def test_a_bubblewrap_that_cannot_build_the_sandbox_is_refused_with_the_reason(
    monkeypatch, tmp_path
):
    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\necho "bwrap: Unknown option --size" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    if shutil.which("setpriv") is None and os.geteuid() == 0:
        pytest.skip("no setpriv: refused before bubblewrap is tried")
    problem = isolation.available.__wrapped__()
    assert problem and "Unknown option --size" in problem and "unsafe-local" in problem


def test_the_view_is_the_interpreter_and_shared_libraries_with_packages_hidden():
    view = isolation.sandbox_view()
    assert os.path.realpath(sys._base_executable) in view.binds
    assert not any(b in ("/", "/usr", "/home", "/work") for b in view.binds)
    names = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    packages = os.path.realpath(sysconfig.get_path("purelib", vars=names))
    if any(packages.startswith(b + os.sep) for b in view.binds):
        assert packages in view.hidden

"""The Python examples of the pages under docs/integrations/ run as written, and their
commented results hold."""

import ast
import re
import threading
import time
from pathlib import Path

import pytest

from tests.services.conftest import start_server

PAGES = Path(__file__).resolve().parents[2] / "docs" / "integrations"


def _blocks(page: str) -> list[str]:
    """The Python blocks of ``docs/integrations/<page>.md``."""
    return re.findall(r"```python\n(.*?)```", (PAGES / f"{page}.md").read_text(), flags=re.S)


def test_every_integration_page_has_a_runnable_example():
    pages = sorted(p.stem for p in PAGES.glob("*.md") if p.stem not in {"index", "installing"})
    assert pages == ["openenv", "openrlhf", "prime", "ray", "trl", "verl"]
    assert all(_blocks(page) for page in pages)


def _run(block: str) -> None:
    """Execute ``block``; its last expression's ``# result`` (on its line or the next) must
    hold."""
    *body, last = block.strip().splitlines()
    if last.lstrip().startswith("#"):  # the result on a line of its own
        *body, line = body
        expression, expected = line, last.lstrip()[1:]
    else:
        expression, _, expected = last.partition("#")
    scope: dict = {}
    exec("\n".join(body), scope)
    assert eval(expression, scope) == ast.literal_eval(expected.strip())


def test_the_integration_examples_run(tmp_path):
    blocks = _blocks("openrlhf") + _blocks("verl")
    assert len(blocks) == 2
    server = start_server(tmp_path / "o.db", "--workers", "1", "--timeout", "2")
    try:
        for block in blocks:
            _run(block.replace("http://127.0.0.1:5000", server.url))
    finally:
        server.stop()


@pytest.mark.integrations
def test_the_openenv_example_runs():
    pytest.importorskip("openenv.core", reason="needs forkgym[openenv]")
    import uvicorn

    from forkgym.integrations.openenv import create_app

    (block,) = _blocks("openenv")
    server = uvicorn.Server(
        uvicorn.Config(create_app("forkgym/Arithmetic-v0"), host="127.0.0.1", port=0)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        _run(block.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}"))
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.integrations
def test_the_prime_example_runs():
    import importlib.metadata

    try:  # not importorskip("verifiers"): a checkout's own verifiers/ folder would answer
        importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs forkgym[prime]")
    (block,) = _blocks("prime")
    _run(block)


@pytest.mark.integrations
def test_the_trl_examples_run(tmp_path, monkeypatch):
    """Both TRL examples, in order (the second reuses the first's names), two steps each."""
    pytest.importorskip("trl", reason="needs forkgym[trl]")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    scope: dict = {}
    for block in _blocks("trl"):  # the second reuses the first's names
        *body, last = block.strip().splitlines()
        expression, _, expected = last.partition("#")
        exec("\n".join(body), scope)
        assert eval(expression, scope) == ast.literal_eval(expected.strip())


@pytest.mark.integrations
@pytest.mark.slow
def test_the_ray_example_runs(tmp_path, warm_model_dir, monkeypatch):
    """A local cluster started and stopped by launch() itself."""
    pytest.importorskip("ray", reason="needs forkgym[ray]")
    import tempfile

    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short paths
    (block,) = _blocks("ray")
    block = block.replace("runs/quickstart/warm", str(warm_model_dir))
    _run(block.replace("runs/ray-demo", str(tmp_path / "ray-demo")))

"""Shared fixtures. Worker pools are expensive to start, so tests share them per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# One intra-op thread for torch here and in every subprocess a test starts: the suite's numbers
# then do not depend on the machine's core count, and a busy machine cannot stall it. With two
# threads beside other work, each of the thousands of tiny forward passes waits at its parallel
# region for a descheduled thread (measured: a vocabulary enumeration took 105 s with one thread
# beside two spinning processes, and had not finished after 280 s with two). Set
# OMP_NUM_THREADS to choose another count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

from forkgym.verifiers import MathVerifier

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# the scripts' shared helpers (benchmarks/lib), imported as the scripts import them: `lib.…`
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``sandbox`` need the OS sandbox (bubblewrap): without it they skip with
    the reason, except where ``FORKGYM_REQUIRE_SANDBOX=1`` (CI sets it) makes that a failure."""
    if item.get_closest_marker("sandbox") is None:
        return
    from forkgym.envs.sandbox.isolation import available

    problem = available()
    if problem is None:
        return
    if os.environ.get("FORKGYM_REQUIRE_SANDBOX"):
        pytest.fail(f"FORKGYM_REQUIRE_SANDBOX is set but {problem}", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def pool_verifier() -> MathVerifier:
    """A real 2-worker verifier (fork server, hard limits), the default production shape."""
    with MathVerifier(timeout=5.0, workers=2, cache_size=0) as verifier:
        yield verifier


@pytest.fixture(scope="session")
def inline_verifier() -> MathVerifier:
    """Grades in the test process: for cases known to be benign."""
    verifier = MathVerifier(workers=0, cache_size=0)
    yield verifier
    verifier.close()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The default tiny model, built once per session (offline, a few seconds)."""
    from forkgym.agents.models import init_model

    return init_model(tmp_path_factory.mktemp("tiny-model") / "model", corpus_seeds=8)


# 1-digit sums, short prompts, compact answers: what the warm model below was trained on.
WARM_ENV_KWARGS = {
    "system_prompt": None,
    "operations": "+",
    "digits": 1,
    "solution_style": "compact",
    "instruction": False,
}


# 2 checked steps on 1-digit numbers: what the steps model below was trained on
STEPS_KWARGS = {"system_prompt": None, "steps": 2, "digits": 1}


@pytest.fixture(scope="session")
def steps_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model after 40k tokens of SFT on CheckedSteps (a few seconds): it writes the
    tool calls, so its episodes have several turns."""
    from forkgym.agents.run.sft import sft

    out = tmp_path_factory.mktemp("steps-model") / "model"
    sft(str(tiny_model_dir), "forkgym/CheckedSteps-v0", tokens=40_000, out=out, batch_size=16, env_kwargs=STEPS_KWARGS)  # fmt: skip
    return out


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model after 16k tokens of SFT on 1-digit sums (~20% greedy accuracy, a few
    seconds): rollouts of it mix right and wrong answers, so advantages and updates are not
    all zero, which an untrained model's are."""
    from forkgym.agents.run.sft import sft

    out = tmp_path_factory.mktemp("warm-model") / "model"
    sft(
        str(tiny_model_dir),
        "forkgym/Arithmetic-v0",
        tokens=16_000,
        out=out,
        batch_size=16,
        env_kwargs=WARM_ENV_KWARGS,
        held_out=False,  # the model the golden runs were recorded from (every problem)
    )
    return out


@pytest.fixture(scope="session")
def postgres_server():
    """A private PostgreSQL cluster for the session (forkgym.store.local_postgres); skipped without the
    server binaries or the psycopg driver."""
    from forkgym.store.local_postgres import pg_bin, private_cluster

    if pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (apt-get install postgresql)")
    pytest.importorskip(
        "psycopg", reason="needs the psycopg driver: pip install 'forkgym[postgres]'"
    )
    with private_cluster() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server, request):
    """A fresh, empty database on the session's cluster; its SQLAlchemy URL."""
    import re
    import uuid

    import sqlalchemy as sa

    name = re.sub(r"\W", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:8]
    admin = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    yield postgres_server.rsplit("/", 1)[0] + f"/{name}"

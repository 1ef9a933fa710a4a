"""The pool's hard limits, tested with builtins so workers need no test code.

``pow(9, 9**9)`` is one long C call that no Python-level signal handler can interrupt,
``os._exit`` is a crash, and ``bytearray(10 GiB)`` exceeds the workers' address-space cap.
"""

import os
import time

import pytest

from forkgym.verifiers import Status
from forkgym.verifiers.worker_pool import WorkerPool, failure_status


@pytest.fixture(scope="module")
def pool():
    pool = WorkerPool(2, memory_limit_mb=1024)
    pool.start()
    yield pool
    pool.close()


def _outcome(future, timeout):
    try:
        return "ok", future.result()
    except BaseException as exc:
        return failure_status(exc, timeout)


def test_a_stuck_c_call_is_killed_within_the_limit(pool):
    start = time.perf_counter()
    status, details = _outcome(pool.submit(pow, 9, 9**9, timeout=1.0), 1.0)
    elapsed = time.perf_counter() - start
    assert status is Status.TIMEOUT and details["reason"] == "time_limit"
    assert elapsed < 10.0  # killed at its 1 s limit; left alone it would run for minutes
    assert pool.submit(sum, [1, 2, 3], timeout=1.0).result() == 6


def test_a_crashed_worker_is_an_error_for_that_item_only(pool):
    crashed = pool.submit(os._exit, 7, timeout=5.0)
    fine = pool.submit(abs, -4, timeout=5.0)
    status, details = _outcome(crashed, 5.0)
    assert status is Status.ERROR and details == {"reason": "worker_crashed", "exitcode": 7}
    assert fine.result() == 4
    assert pool.submit(abs, -5, timeout=5.0).result() == 5


def test_memory_limit_becomes_a_timeout_status(pool):
    status, details = _outcome(pool.submit(bytearray, 10 * 2**30, timeout=5.0), 5.0)
    assert status is Status.TIMEOUT and details["reason"] == "memory_limit"
    assert pool.submit(len, "abc", timeout=5.0).result() == 3


def test_worker_exceptions_are_errors(pool):
    status, details = _outcome(pool.submit(int, "not a number", timeout=5.0), 5.0)
    assert status is Status.ERROR and details["reason"] == "worker_exception"
    assert "ValueError" in details["exception"]


def test_closed_pool_restarts_on_next_submit():
    pool = WorkerPool(1)
    try:
        assert pool.submit(abs, -1, timeout=10).result() == 1
        pool.close()
        assert not pool.started
        assert pool.submit(abs, -2, timeout=10).result() == 2
    finally:
        pool.close()


def test_rejects_empty_pool():
    with pytest.raises(ValueError):
        WorkerPool(0)


def test_workers_never_rerun_an_unguarded_main_script(tmp_path):
    """A script with no `if __name__ == "__main__":` guard, and a heredoc, both just work."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "print('TOP-LEVEL RAN', flush=True)\n"
        "from forkgym.verifiers import MathVerifier\n"
        "v = MathVerifier(workers=2, timeout=10)\n"
        "print(v.verify('x^2-1', r'\\boxed{(x-1)(x+1)}').status.value)\n"
        "v.close()\n"
    )
    for args in ([str(script)], ["-"]):
        stdin = None if args != ["-"] else script.read_text()
        proc = subprocess.run(
            [sys.executable, *args], input=stdin, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["TOP-LEVEL", "RAN", "correct"], proc.stdout
        assert "Traceback" not in proc.stderr


def _grade_in_child():
    from forkgym.envs.grading import default_verifier

    # the process-wide verifier every env shares, alive until exit; off the fast path
    default_verifier().verify("8", r"so \boxed{5+3}")


def test_a_multiprocessing_child_that_started_workers_exits():
    """A child joins its children before Python's exit hooks; unstopped workers hung it."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=_grade_in_child)
    child.start()
    child.join(60)
    exitcode = child.exitcode
    if exitcode is None:
        child.kill()
        child.join()
    assert exitcode == 0

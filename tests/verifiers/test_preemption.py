"""Preemption in the verifier's pool: a call kept waiting by a long item of another caller
takes its worker, and the stopped item runs again with its verdict unchanged."""

from __future__ import annotations

import threading
import time

import pytest

from forkgym.verifiers import MathVerifier, Status

# sympy takes a second or so to decide each (slower on a busy machine): long enough to be
# preempted, well inside the limit
SLOW_RIGHT = (r"3^{2000000}", r"\boxed{9^{1000000}}")
SLOW_WRONG = (r"3^{2000000}", r"\boxed{9^{1000001}}")


@pytest.mark.slow
def test_a_preempted_item_keeps_its_verdict_and_the_waiting_call_goes_first():
    verifier = MathVerifier(timeout=30, workers=1, cache_size=0, preempt_after_s=0.1)
    with verifier:
        verifier.verify("2x+3", r"\boxed{3+2x}")  # the worker is warm
        busy: list = []
        flood = threading.Thread(
            target=lambda: busy.extend(verifier.verify_many([SLOW_RIGHT, SLOW_WRONG]))
        )
        flood.start()
        time.sleep(0.3)  # the first slow item holds the only worker past the slice
        simple = verifier.verify("2x+1", r"\boxed{1+2x}")
        flood.join()
    assert simple.status is Status.CORRECT
    assert verifier.preemptions == 1  # the slow item that held the worker, once
    assert [o.status for o in busy] == [Status.CORRECT, Status.INCORRECT]  # as without preemption


def test_preemption_is_off_unless_asked_for():
    assert MathVerifier(workers=0).preemptions == 0
    with pytest.raises(ValueError):
        MathVerifier(workers=1, preempt_after_s=0)

"""Pathological answers: bounded time, a clear status, and the verifier keeps serving."""

import threading
import time

import pytest

from forkgym.verifiers import MathVerifier, Status

LIMIT = 2.0
ALLOWED = {Status.TIMEOUT, Status.INVALID, Status.INCORRECT}


def _nested_frac(depth: int) -> str:
    text = "1"
    for _ in range(depth):
        text = r"\frac{1}{" + text + "}"
    return text


PATHOLOGICAL = {
    "power tower": ("3", r"\boxed{9^{9^{9^{9}}}}"),
    "power tower as reference": (r"9^{9^{9^{9}}}", r"\boxed{3}"),
    # the tower equals 1, so the reference is 2: wrong whether it is judged or times out
    "200-deep nested frac": ("2", r"\boxed{" + _nested_frac(200) + "}"),
    "200 kB response": ("42", "lorem ipsum " * 17_000 + r"\boxed{41}"),
    "200 kB integer in the box": ("42", r"\boxed{" + "7" * 200_000 + "}"),
    "200 kB expression in the box": ("42", r"\boxed{" + "x+" * 100_000 + "1}"),
    "huge factorial": ("3", r"\boxed{(10^{10})!}"),
    "astronomic factorial": ("3", r"\boxed{(10^{100})!}"),
    "integral sympy cannot close": ("1", r"\boxed{\int_0^1 e^{x^3}\sin(x^5)\,dx}"),
    "huge power difference": ("1", r"\boxed{10^{10^{10}} - 10^{10^{10}} + 1}"),
    "NUL bytes": ("5", "\x00" + r"\boxed{5" + "\x00" + "}"),
    "lone surrogates": ("5", "\ud800" + r"\boxed{\udfff}"),
    "surrogate in reference": ("\ud800", r"\boxed{5}"),
}


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(timeout=LIMIT, workers=2) as verifier:
        yield verifier


def _check(verifier, reference, response):
    start = time.perf_counter()
    outcome = verifier.verify(reference, response)
    elapsed = time.perf_counter() - start
    return outcome, elapsed


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_answer_is_bounded_and_the_next_request_succeeds(verifier, name):
    reference, response = PATHOLOGICAL[name]
    outcome, elapsed = _check(verifier, reference, response)
    assert elapsed < LIMIT + 10.0, f"{name} took {elapsed:.2f}s"  # bounded: killed, not run out
    allowed = ALLOWED | {Status.ERROR} if "reference" in name else ALLOWED
    assert outcome.status in allowed, (name, outcome)
    assert outcome.reward is None if outcome.is_infrastructure else outcome.reward == 0.0
    follow_up, elapsed = _check(verifier, r"\frac{1}{2}", r"\boxed{\frac{2}{4}}")
    assert follow_up.status is Status.CORRECT and elapsed < LIMIT + 5.0


@pytest.mark.slow
def test_eight_threads_at_once_share_one_verifier():
    """8 callers each send a pathological and then a normal symbolic answer at the same time.

    The normal answer is a cheap symbolic one (sqrt): with 8 workers on a 2-core machine the
    pathological items burn every core until they are killed, and a wall-clock limit is
    a wall-clock limit. After the storm a heavier polynomial check must pass too.
    """
    names = ["power tower", "huge factorial", "integral sympy cannot close",
             "200-deep nested frac", "huge power difference", "astronomic factorial",
             "200 kB expression in the box", "NUL bytes"]  # fmt: skip
    results: dict[str, tuple] = {}
    errors: list[BaseException] = []
    with MathVerifier(timeout=LIMIT, workers=8) as verifier:
        barrier = threading.Barrier(len(names))

        def caller(name):
            try:
                barrier.wait()
                bad = _check(verifier, *PATHOLOGICAL[name])
                good = _check(verifier, "2", r"\boxed{\sqrt{4}}")
                results[name] = (bad, good)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors and len(results) == len(names)
        for name, ((bad, bad_s), (good, good_s)) in results.items():
            assert bad.status in ALLOWED and bad_s < LIMIT + 1.0, (name, bad, bad_s)
            assert good.status is Status.CORRECT and good_s < LIMIT + 1.0, (name, good, good_s)
        assert verifier.verify("x^2-1", r"\boxed{(x-1)(x+1)}").status is Status.CORRECT


@pytest.mark.slow
def test_queued_items_share_workers_fairly_with_two_workers():
    """With fewer workers than callers, items queue; the limit is per verification."""
    items = [PATHOLOGICAL["power tower"]] * 4 + [("1/2", r"\boxed{\frac{3}{6}}")] * 4
    with MathVerifier(timeout=LIMIT, workers=2, cache_size=0) as verifier:
        start = time.perf_counter()
        outcomes = verifier.verify_many(items)
        elapsed = time.perf_counter() - start
    assert [o.status for o in outcomes] == [Status.TIMEOUT] * 4 + [Status.CORRECT] * 4
    assert all(o.latency_ms < (LIMIT + 1.0) * 1e3 for o in outcomes)
    assert elapsed < 4 * LIMIT  # 4 timeouts on 2 workers: two rounds (~2 limits), not four

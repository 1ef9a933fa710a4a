import pytest

from forkgym.verifiers import MathVerifier


@pytest.fixture(scope="module")
def one_worker():
    """A real verifier with one worker and a 3 s limit, no cache, for one test module."""
    with MathVerifier(timeout=3.0, workers=1, cache_size=0) as verifier:
        yield verifier

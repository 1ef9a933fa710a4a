"""The asynchronous schedule on its own (no model): which weights each batch sees, and that
generation really runs while the learner updates."""

from __future__ import annotations

import threading

import pytest

from forkgym.agents.generation.prefetch import Prefetcher


class FakeLearner:
    """A weight version that moves at each push, and a log of what generated when."""

    def __init__(self) -> None:
        self.version = 0
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def collect(self, step: int):
        with self.lock:
            self.events.append(("generate", step))
        return (step, self.version), None

    def push(self) -> str:
        self.version += 1
        return "pushed"


@pytest.mark.parametrize("m", [1, 2, 3])
def test_each_batch_sees_the_weights_of_m_steps_before_and_never_older(m):
    fake = FakeLearner()
    with Prefetcher(fake.collect, max_staleness=m, first_step=0, end_step=8) as prefetch:
        for step in range(8):
            (made_for, version), _, _ = prefetch.get(step)
            assert made_for == step
            # a fixed schedule, not a race: V[s - m], the version at the start of step s - m
            assert version == max(0, step - m)
            assert fake.version - version <= m
            out, _ = prefetch.finished(step, fake.push)
            assert out == "pushed"
    assert [s for _, s in fake.events] == list(range(8))  # every batch once, none past the end


def test_the_next_batch_is_generated_while_the_learner_updates():
    fake = FakeLearner()
    generating = threading.Event()

    def collect(step):
        if step == 1:
            generating.set()
        return fake.collect(step)

    with Prefetcher(collect, max_staleness=1, first_step=0, end_step=3) as prefetch:
        prefetch.get(0)
        # "the update of step 0": it does not end until step 1's batch is being generated,
        # which only an overlapping producer can do (a synchronous loop would wait forever)
        assert generating.wait(timeout=60)
        prefetch.finished(0, fake.push)
        assert prefetch.get(1)[0] == (1, 0)  # generated before the push: one version old


def test_a_resume_hands_out_the_batches_generated_ahead_first():
    fake = FakeLearner()
    fake.version = 5
    ready = {5: ((5, 4), None)}  # generated before the checkpoint, with version 4
    with Prefetcher(fake.collect, max_staleness=1, first_step=5, end_step=7, ready=ready) as p:
        assert p.get(5)[0] == (5, 4)
        p.finished(5, fake.push)
        assert p.get(6)[0] == (6, 5)
    assert fake.events == [("generate", 6)]


def test_pending_keeps_the_batches_older_than_the_checkpoint():
    fake = FakeLearner()
    with Prefetcher(fake.collect, max_staleness=2, first_step=0, end_step=10) as prefetch:
        prefetch.get(0)
        prefetch.finished(0, fake.push)
        # steps 1 and 2 were generated with version 0, before the push: a checkpoint now keeps
        # them; step 3's (the checkpoint's own weights) would be generated again on resume
        assert sorted(prefetch.pending()) == [1, 2]
        assert [v for (_, v), _ in prefetch.pending().values()] == [0, 0]


def test_a_failing_generation_reaches_the_learner():
    def collect(step):
        raise OSError("engine died")

    with Prefetcher(collect, max_staleness=1, first_step=0, end_step=2) as prefetch:
        with pytest.raises(RuntimeError, match="asynchronous generation failed") as info:
            prefetch.get(0)
        assert isinstance(info.value.__cause__, OSError)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_staleness"):
        Prefetcher(lambda s: (s, None), max_staleness=0, first_step=0, end_step=1)
    with pytest.raises(ValueError, match="steps"):
        Prefetcher(lambda s: (s, None), max_staleness=1, first_step=3, end_step=5, ready={4: 1})

"""Free workers go round-robin to callers; a caller that was never served goes first."""

from __future__ import annotations

import threading

import pytest

from forkgym.verifiers.fair_slots import FairSlots


def test_a_new_lane_gets_the_next_free_slot_before_a_busy_one():
    slots = FairSlots(1)
    assert slots.acquire("big", timeout=0)
    got = threading.Event()

    def newcomer() -> None:
        assert slots.acquire("new", timeout=30)
        got.set()

    thread = threading.Thread(target=newcomer)
    thread.start()
    while "new" not in slots._waiting:  # the newcomer is queued
        threading.Event().wait(0.001)
    slots.release()  # big's item finished ...
    assert not slots.acquire("big", timeout=0)  # ... and big may not take the slot back
    thread.join(timeout=30)
    assert got.is_set() and slots.busy == 1
    slots.release()
    assert slots.acquire("big", timeout=0)  # now it is big's turn again


def test_lanes_alternate_and_capacity_holds():
    slots = FairSlots(2)
    assert slots.acquire("a", timeout=0) and slots.acquire("b", timeout=0)
    assert not slots.acquire("c", timeout=0)  # full
    slots.release()
    assert slots.acquire("c", timeout=0)  # c was never served: first
    slots.release()
    # a and b were served, a longer ago: a goes before b
    slots._waiting.add("b")
    assert slots.acquire("a", timeout=0)
    slots.leave("a")
    slots.leave("b")
    slots.leave("c")
    with pytest.raises(ValueError):
        FairSlots(0)

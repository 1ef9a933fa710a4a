"""Free workers go fairly to callers (a caller that was never served goes first); a caller left
waiting takes over the worker of a long item of a busier caller, at most once per item."""

from __future__ import annotations

import threading
import time

import pytest

from forkgym.verifiers.fair_slots import FairSlots, Ticket, _Want

SLICE = 0.05
stopped: list[Ticket] = []  # the tickets whose items were stopped, in order


def _held(slots: FairSlots, lane: str, caller: str | None = None) -> Ticket:
    """A slot for ``lane`` whose item is in the pool now; records whether it was stopped."""
    ticket = slots.acquire(lane, caller, timeout=0)
    assert ticket is not None
    slots.started(ticket, lambda: stopped.append(ticket))
    return ticket


def test_a_new_lane_gets_the_next_free_slot_before_a_busy_one():
    slots = FairSlots(1)
    big = slots.acquire("big", timeout=0)
    assert big is not None
    got = threading.Event()

    def newcomer() -> None:
        assert slots.acquire("new", timeout=30) is not None
        got.set()

    thread = threading.Thread(target=newcomer)
    thread.start()
    while "new" not in slots._waiting:  # the newcomer is queued
        threading.Event().wait(0.001)
    slots.release(big)  # big's item finished ...
    assert slots.acquire("big", timeout=0) is None  # ... and big may not take the slot back
    thread.join(timeout=30)
    assert got.is_set() and slots.busy == 1
    slots.release(slots._holders[0])
    assert slots.acquire("big", timeout=0) is not None  # now it is big's turn again


def test_lanes_alternate_and_capacity_holds():
    slots = FairSlots(2)
    a, b = slots.acquire("a", timeout=0), slots.acquire("b", timeout=0)
    assert a is not None and b is not None
    assert slots.acquire("c", timeout=0) is None  # full
    slots.release(a)
    c = slots.acquire("c", timeout=0)
    assert c is not None  # c was never served: first
    slots.release(c)
    # a and b were served, a longer ago: a goes before b
    slots._waiting["b"] = _Want("b", 0.0, fresh=True, rerun=False)
    assert slots.acquire("a", timeout=0) is not None
    for lane in "abc":
        slots.leave(lane)
    with pytest.raises(ValueError):
        FairSlots(0)
    with pytest.raises(ValueError):
        FairSlots(1, preempt_after=0)


def test_a_caller_holding_fewer_slots_goes_first():
    slots = FairSlots(3)
    _held(slots, "a1", "run-a")
    _held(slots, "a2", "run-a")
    b1 = _held(slots, "b1", "run-b")
    got: list[Ticket | None] = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire("b2", "run-b", timeout=30)))
    waiter.start()
    while "b2" not in slots._waiting:
        time.sleep(0.001)
    slots.release(b1)
    # a newer request of run-a comes, but run-b holds fewer slots: b2 goes first
    assert slots.acquire("a3", "run-a", timeout=0) is None
    waiter.join(timeout=30)
    assert got and got[0] is not None


def test_a_waiting_caller_takes_over_a_long_item_of_a_busier_one():
    stopped.clear()
    slots = FairSlots(2, preempt_after=SLICE)
    a1, a2 = _held(slots, "a", "flood"), _held(slots, "a", "flood")
    assert slots.acquire("b", timeout=0) is None  # the items have not run a slice yet
    time.sleep(SLICE * 1.5)
    ticket = slots.acquire("b", timeout=0)
    assert ticket is not None and not ticket.rerun
    assert stopped == [a1] and a1.preempted and not a2.preempted  # the longest-running one
    assert slots.busy == 2 and slots.preemptions == 1
    slots.release(a1)  # the stopped item's own release gives nothing back: b holds the slot
    assert slots.busy == 2
    # the preempted item runs again from the start and is never preempted twice
    slots.release(ticket)
    again = slots.acquire("a", "flood", fresh=False, rerun=True, timeout=0)
    assert again is not None and again.rerun
    slots.started(again, lambda: stopped.append(again))
    time.sleep(SLICE * 1.5)
    c = slots.acquire("c", timeout=0)
    assert c is not None and stopped == [a1, a2]  # c took a2's slot, never the rerun's


def test_lanes_of_one_caller_never_preempt_each_other():
    slots = FairSlots(1, preempt_after=SLICE)
    _held(slots, "a1", "run")
    time.sleep(SLICE * 1.5)
    assert slots.acquire("a2", "run", timeout=0) is None
    assert slots.acquire("b", "other", timeout=0) is not None


def test_an_item_started_while_the_lane_waited_is_not_preempted():
    """Items handed out while a lane waited were handed out fairly: requests that come
    together never stop each other's items."""
    slots = FairSlots(1, preempt_after=SLICE)
    before = _held(slots, "before")
    assert slots.acquire("late", timeout=0) is None  # "late" comes while the pool is full
    slots.release(before)
    slots.leave("before")
    first = _held(slots, "early")  # started after "late" came
    time.sleep(SLICE * 1.5)
    assert slots.acquire("late", timeout=0) is None
    assert not first.preempted
    assert slots.acquire("later", timeout=0) is not None  # came after it started


def test_reruns_leave_one_slot_that_can_be_preempted():
    slots = FairSlots(2, preempt_after=SLICE)
    r1 = slots.acquire("a", fresh=False, rerun=True, timeout=0)
    assert r1 is not None and r1.rerun
    # a second rerun may not start while one runs: the last slot stays preemptible
    assert slots.acquire("b", fresh=False, rerun=True, timeout=0) is None
    fresh = slots.acquire("b", fresh=True, rerun=True, timeout=0)
    assert fresh is not None and not fresh.rerun
    assert slots.rerun_cap == 1 and FairSlots(1).rerun_cap == 1


def test_without_a_slice_nothing_is_preempted():
    slots = FairSlots(1)
    _held(slots, "a")
    time.sleep(SLICE)
    assert slots.acquire("b", timeout=0) is None and slots.preemptions == 0


def test_a_preempted_item_goes_back_in_before_new_requests():
    slots = FairSlots(2, preempt_after=SLICE)
    a, b = _held(slots, "a"), _held(slots, "b")
    got: list[Ticket | None] = []
    rerun = threading.Thread(
        target=lambda: got.append(slots.acquire("r", fresh=False, rerun=True, timeout=30))
    )
    rerun.start()
    while "r" not in slots._waiting:
        time.sleep(0.001)
    slots._waiting["new"] = _Want("new", time.monotonic(), fresh=True, rerun=False)
    slots._new["new"] = time.monotonic()  # a newer request also waits
    slots.release(a)
    rerun.join(timeout=30)
    assert got and got[0] is not None and got[0].rerun
    slots.release(b)

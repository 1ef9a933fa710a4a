"""Fair shares of the worker pool between concurrent callers, and preemption of long items.

A process pool serves its queue first come, first served, so one caller that submits a large
batch of slow items makes every later caller wait behind all of it. :class:`FairSlots` keeps
at most ``capacity`` items in the pool at once and decides who goes next.

A *lane* is one call waiting for slots (one request in the service); its *caller* is whom it
grades for. Lanes given the same caller count as one caller (the service gives every request
of one run the same); a lane given none is a caller of its own.

* A free slot goes to the waiting lane whose caller holds the fewest slots; among those, a
  lane that can start a rerun (below), then a lane never served (the one that came last
  first), then the lane served least recently. A request that comes while others hold every
  worker does not wait for what they have queued.
* A worker only frees when its item ends, which for a pathological item is a whole time
  limit. With ``preempt_after`` set, a waiting lane that finds every slot taken takes over
  the slot of an item that belongs to a caller holding more slots than its own, was already
  in the pool when the lane came, has held its slot for ``preempt_after`` seconds, and was
  never preempted. That item is stopped (its ticket's ``stop``) and its lane runs it again
  from the start, with its full time limit, as a *rerun* that is never preempted again: its
  worker time is at most ``preempt_after`` (plus the moment it takes to stop it) more than
  it would have been, and its outcome is unchanged. (Items that started while a lane waited
  were handed out fairly, so they are not its to take: of a burst of requests that come
  together, only the items that started before the rest came can be stopped.)
* At most ``capacity - 1`` reruns (at least one) hold slots at once, so with two or more
  workers one slot always holds an item that can still be preempted or that started less
  than ``preempt_after`` ago: a caller that holds no slot waits about ``preempt_after`` at
  most, not a whole time limit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["FairSlots", "Ticket"]

_TICK = 0.05  # how often a waiting lane looks again while items may become preemptible


@dataclass(eq=False)
class Ticket:
    """One slot, held for one item."""

    lane: Hashable
    caller: Hashable
    rerun: bool  # the item runs again after a preemption: it is never preempted twice
    since: float | None = None  # when the item went into the pool (time.monotonic())
    stop: Callable[[], object] | None = None
    preempted: bool = False  # its slot went to another caller: releasing it is a no-op


@dataclass
class _Want:
    """What a waiting lane can start: a new item, a rerun, or either."""

    caller: Hashable
    came: float
    fresh: bool
    rerun: bool


class FairSlots:
    """``capacity`` slots shared fairly by lanes; see the module docstring."""

    def __init__(self, capacity: int, preempt_after: float | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if preempt_after is not None and not preempt_after > 0:
            raise ValueError("preempt_after must be positive (or None: never preempt)")
        self.capacity = capacity
        self.preempt_after = preempt_after
        self.rerun_cap = max(1, capacity - 1)
        self.preemptions = 0  # items stopped to give their slot to another caller
        self._cond = threading.Condition()
        self._new: OrderedDict[Hashable, float] = OrderedDict()  # never served, newest first
        self._served: OrderedDict[Hashable, float] = OrderedDict()  # least recently first
        self._waiting: dict[Hashable, _Want] = {}
        self._holders: list[Ticket] = []

    @property
    def busy(self) -> int:
        return len(self._holders)

    def acquire(
        self,
        lane: Hashable,
        caller: Hashable | None = None,
        *,
        fresh: bool = True,
        rerun: bool = False,
        timeout: float | None = None,
    ) -> Ticket | None:
        """A slot for ``lane`` when it is this lane's turn (its ticket says whether it is for
        a rerun: a lane that can start both starts its rerun when the reruns allow it); None
        after ``timeout`` (0: do not wait). ``caller`` defaults to the lane itself."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if lane not in self._new and lane not in self._served:
                self._new[lane] = time.monotonic()
                self._new.move_to_end(lane, last=False)  # ahead of everyone
            came = self._new.get(lane, self._served.get(lane, 0.0))
            want = _Want(lane if caller is None else caller, came, fresh, rerun)
            ticket, victim = self._wait(lane, want, deadline)
        if victim is not None and victim.stop is not None:
            victim.stop()  # outside the lock: stopping may run the future's callbacks
        return ticket

    def started(self, ticket: Ticket, stop: Callable[[], object]) -> None:
        """``ticket``'s item is in the pool now; ``stop`` stops it (a preemption)."""
        with self._cond:
            ticket.since, ticket.stop = time.monotonic(), stop

    def release(self, ticket: Ticket) -> None:
        """Give a slot back (its item finished or was stopped)."""
        with self._cond:
            if not ticket.preempted and ticket in self._holders:
                self._holders.remove(ticket)
            self._cond.notify_all()

    def leave(self, lane: Hashable) -> None:
        """``lane`` is done: forget its turn."""
        with self._cond:
            self._new.pop(lane, None)
            self._served.pop(lane, None)
            self._waiting.pop(lane, None)
            self._cond.notify_all()

    # -- under the lock ----------------------------------------------------------------------

    def _wait(
        self, lane: Hashable, want: _Want, deadline: float | None
    ) -> tuple[Ticket | None, Ticket | None]:
        self._waiting[lane] = want
        try:
            while True:
                got = self._grant(lane, want)
                if got is not None:
                    return got
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None, None
                if self.preempt_after is not None:  # time alone can make an item preemptible
                    left = _TICK if left is None else min(left, _TICK)
                self._cond.wait(left)
        finally:
            self._waiting.pop(lane, None)
            self._cond.notify_all()  # the next lane in line may go now

    def _grant(self, lane: Hashable, want: _Want) -> tuple[Ticket, Ticket | None] | None:
        """A ticket for ``lane`` if it may take a slot now, with the item it takes it from."""
        rerun = want.rerun and self._reruns() < self.rerun_cap
        if not (want.fresh or rerun):
            return None
        held = self._held()
        victim = None
        if len(self._holders) < self.capacity:
            if self._first(held) != lane:
                return None
        else:
            victim = self._victim(want, held)
            if victim is None or self._first(held, preempting=True) != lane:
                return None
            victim.preempted = True
            self._holders.remove(victim)
            self.preemptions += 1
        ticket = Ticket(lane, want.caller, rerun)
        self._holders.append(ticket)
        self._new.pop(lane, None)
        self._served.pop(lane, None)
        self._served[lane] = want.came
        return ticket, victim

    def _first(self, held: dict[Hashable, int], preempting: bool = False) -> Hashable | None:
        """The waiting lane next in line: its caller holds the fewest slots; then a lane that
        can start a rerun now; then never served (the newest first), then served least
        recently. ``preempting``: of the lanes that have an item to take over."""
        rerun_room = self._reruns() < self.rerun_cap
        best, best_key = None, None
        for lane in [*self._new, *self._served]:
            want = self._waiting.get(lane)
            if want is None or not (want.fresh or (want.rerun and rerun_room)):
                continue
            key = (held.get(want.caller, 0), not (want.rerun and rerun_room))
            if (best_key is None or key < best_key) and (not preempting or self._victim(want, held)):  # fmt: skip
                best, best_key = lane, key
        return best

    def _victim(self, want: _Want, held: dict[Hashable, int]) -> Ticket | None:
        """The item ``want``'s lane may take the slot of (see the module docstring): of the
        caller holding the most slots, the one that has run longest."""
        if self.preempt_after is None:
            return None
        now, mine = time.monotonic(), held.get(want.caller, 0)
        fair = [
            t
            for t in self._holders
            if not t.rerun
            and t.since is not None
            and t.since <= want.came
            and now - t.since >= self.preempt_after
            and t.caller != want.caller
            and held[t.caller] > mine
        ]
        return max(fair, key=lambda t: (held[t.caller], now - t.since), default=None)  # type: ignore[operator]

    def _held(self) -> dict[Hashable, int]:
        held: dict[Hashable, int] = {}
        for ticket in self._holders:
            held[ticket.caller] = held.get(ticket.caller, 0) + 1
        return held

    def _reruns(self) -> int:
        return sum(t.rerun for t in self._holders)

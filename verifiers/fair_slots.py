"""Fair shares of the worker pool between concurrent callers (requests, threads).

A process pool serves its queue first come, first served, so one caller that submits a large
batch of slow items makes every later caller wait behind all of it. :class:`FairSlots` keeps
at most ``capacity`` items in the pool at once and hands each free slot to the waiting caller
("lane") that was served least recently; a new lane goes first. A caller arriving while every
worker is busy therefore starts its first item as soon as one worker frees, whatever the
others have queued: it waits at most one item's time limit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["FairSlots"]


class FairSlots:
    """``capacity`` slots shared round-robin by lanes; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.busy = 0
        self._cond = threading.Condition()
        self._order: OrderedDict[Hashable, None] = OrderedDict()  # least recently served first
        self._waiting: set[Hashable] = set()

    def acquire(self, lane: Hashable, timeout: float | None = None) -> bool:
        """Take a slot for ``lane`` when it is this lane's turn; False after ``timeout``
        (0: do not wait)."""
        with self._cond:
            if lane not in self._order:  # never served: ahead of everyone who was
                self._order[lane] = None
                self._order.move_to_end(lane, last=False)
            self._waiting.add(lane)
            try:
                ok = self._cond.wait_for(lambda: self._my_turn(lane), timeout=timeout)
                if ok:
                    self.busy += 1
                    self._order.move_to_end(lane)
                return ok
            finally:
                self._waiting.discard(lane)
                self._cond.notify_all()  # the next lane in line may go now

    def release(self) -> None:
        """Give a slot back (its item finished or was stopped)."""
        with self._cond:
            self.busy -= 1
            self._cond.notify_all()

    def leave(self, lane: Hashable) -> None:
        """``lane`` is done: forget its turn."""
        with self._cond:
            self._order.pop(lane, None)
            self._waiting.discard(lane)
            self._cond.notify_all()

    def _my_turn(self, lane: Hashable) -> bool:
        if self.busy >= self.capacity:
            return False
        first = next(l for l in self._order if l in self._waiting)  # noqa: E741
        return first == lane

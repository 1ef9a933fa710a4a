"""Math answer verification: extraction, an exact fast path, and math-verify in a killable pool.

A verification goes through three stages, cheapest first:

1. extraction (in the caller, linear time): the final answer or ``invalid``;
2. the exact fast path (in the caller, microseconds): plain integers, decimals and fractions;
3. math-verify + sympy in a :class:`~forkgym.verifiers.worker_pool.WorkerPool` worker, under a
   hard wall-clock limit; a killed or crashed worker becomes ``timeout`` / ``error`` for that
   item only.

``workers=0`` runs stage 3 in the calling thread instead: fastest for trusted inputs and
benchmarks, but then nothing can stop a pathological expression, so never use it on untrusted
model output in a server.
"""

from __future__ import annotations

import os
import re
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any, NamedTuple

from .boxes import box_argument, boxed_spans, unclosed_box_content
from .extract import Extraction, boxed_answer, read_found, read_math, split_top_level
from .fair_slots import FairSlots, Ticket
from .fastpath import fast_compare
from .outcome import DEFAULT_REWARDS, Outcome, RewardMap, Status
from .presets import extractor_for
from .prose import readable_prose
from .spellings import respell
from .worker_pool import WorkerPool, failure_status

__all__ = [
    "GRADING_RULES",
    "MULTI_BOX",
    "MathVerifier",
    "ReferenceAnswer",
    "parser_input",
    "read_reference",
    "reference_answer",
    "reference_parts",
]

# How several boxes are graded (MathVerifier's `multi_box`):
# "list": the final answer is the last box with the boxes chained to it, on both sides, and a
#   list answer is compared as math-verify compares lists (a set unless written as a tuple);
# "parts": every box of the reference is one part, in order, and all must be right;
# "last": only the last box of each side is the answer.
MULTI_BOX = ("list", "parts", "last")
# Changes whenever forkgym's own reading of answers changes (part of the verifier version).
# 3: exactly different numbers differ; the last stated answer governs. 4: a decimal answer is
# right at its written precision; a one-variable relation equals its interval; prose loses the
# inline math that math-verify's LaTeX reading refuses.
GRADING_RULES = 4

_WORKER_MODULE = "forkgym.verifiers.math_worker"
_CACHEABLE = frozenset({Status.CORRECT, Status.INCORRECT, Status.INVALID})

# Numbers written as plain text that math-verify reads otherwise inside math: "1 000" is 1000
# as text but 1*000 in math, "1,22" the decimal 1.22 as text but the list 1, 22 in math.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?: \d{3})+(?:\.\d+)?|\d+,\d+)", re.ASCII)


def parser_input(answer: str, plain: bool = False, raw: bool = False) -> str:
    """The exact text math-verify parses for an extracted answer: a number written as plain
    text (``plain``) as it stands, anything else inside a box, so that math-verify reads that
    text, all of it, as math; a whole response (``raw``, the ``prose`` strategy) as written,
    less the inline math that math-verify's LaTeX reading refuses, for its own extraction."""
    if raw:
        return readable_prose(answer)
    if plain and _PLAIN_NUMBER.fullmatch(answer):
        return answer
    return "\\boxed{" + respell(answer) + "}"


class ReferenceAnswer(NamedTuple):
    """The answer a reference states: its text (None if it has none), whether it is written as
    plain text, a list's items, and ``note="unclosed_box"`` when its last box is cut off and
    the box's content was taken."""

    text: str | None
    plain: bool = False
    items: tuple[str, ...] | None = None
    note: str | None = None


def read_reference(reference: str, chain: bool = True) -> ReferenceAnswer:
    """Read a reference the way the ``boxed`` strategy reads a response: its last box with the
    boxes that belong to it (``chain=False``: the last box alone), or Minerva's closing
    sentence after it; with neither, its text without math delimiters. A reference whose last
    box is cut off is graded on the box's content."""
    if "\\" not in reference and "$" not in reference and "I hope" not in reference:
        # plain text (a dataset's "72"): no box, math or closing sentence to look for
        text = reference.strip()
        return ReferenceAnswer(text or None, True)
    return _read_marked_up_reference(reference, chain)


@lru_cache(maxsize=4096)
def _read_marked_up_reference(reference: str, chain: bool) -> ReferenceAnswer:
    found = boxed_answer(reference, chain)
    if found is not None:
        text, items, plain = read_found(reference, found)
        return ReferenceAnswer(text or None, plain, items)
    if "\\boxed" in reference or "\\fbox" in reference:
        content = unclosed_box_content(reference)
        if content is not None:
            text, items = read_math(content.rstrip().rstrip("$.").rstrip())
            return ReferenceAnswer(text or None, items=items, note="unclosed_box")
        return ReferenceAnswer(None)
    text, items = read_math(reference)
    return ReferenceAnswer(text or None, items is None and text == reference.strip(), items)


def reference_answer(reference: str) -> str | None:
    """The answer a reference states (see :func:`read_reference`): ``"1,2"`` for
    ``\\boxed{1}, \\boxed{2}``, ``"5"`` for ``$5$``; None if it states none."""
    return read_reference(reference).text


def _collapse(items: list[str]) -> list[str]:
    """Consecutive repeats collapse: the same answer boxed twice is one part."""
    return [x for i, x in enumerate(items) if i == 0 or x != items[i - 1]]


def reference_parts(reference: str) -> list[str] | None:
    """The parts of a multi-part reference (``multi_box="parts"``): the contents of each of
    its boxes, repeats in a row collapsed, when two or more remain; else None."""
    if "\\boxed" not in reference and "\\fbox" not in reference:
        return None
    parts = _collapse([read_math(reference[a:b])[0] for a, b in boxed_spans(reference)])
    return parts if len(parts) >= 2 else None


def split_parts(answer: str) -> list[str]:
    """One answer cut into parts at top-level commas and semicolons, a set's braces opened
    first (``{2, 3, 5}`` and ``\\{2, 3, 5\\}`` are three parts)."""
    s = answer.strip()
    if s.startswith("\\left\\{") and s.endswith("\\right\\}"):
        s = s[len("\\left\\{") : -len("\\right\\}")]
    elif s.startswith("\\{") and s.endswith("\\}") and s.count("\\}") == 1:
        s = s[2:-2]
    elif s.startswith("{") and box_argument(s, 0) == (1, len(s) - 1):
        s = s[1:-1]
    return split_top_level(s)


def _grade_in_worker(*args: Any) -> tuple[str, dict[str, Any]]:
    """Runs in a worker. A trampoline, so the caller never imports math-verify (and sympy)."""
    from .math_worker import grade

    return grade(*args)


@dataclass
class _Item:
    """One pair on its way through the stages.

    Its latency is the time spent on it, not the time it sat behind other items of the same
    batch: preparation time plus, for pool items, submission to completion.
    """

    start: float
    parts: list[_Item] | None = None  # a multi-part answer: one item per part
    note: str | None = None  # about the reference (an unclosed box whose content was taken)
    extracted: str | None = None
    strategy: str | None = None
    span: tuple[int, int] | None = None
    key: tuple[str, str] | None = None  # what math-verify parses: (reference, answer)
    status: Status | None = None
    details: dict[str, Any] | None = None
    end: float | None = None
    prepared: float = 0.0  # when stages 1-2 finished without a verdict
    queued_s: float = 0.0  # time between preparation and submission, excluded from latency


class MathVerifier:
    """Grades a response against a reference answer into an :class:`Outcome`.

    Thread-safe: one instance (and its pool) is meant to be shared by every thread of a
    process. Use it as a context manager, or call :meth:`close`, to stop the workers.

    Args:
        timeout: hard wall-clock limit in seconds for one math-verify comparison, counted from
            when a worker starts it.
        workers: worker processes (default: CPU count); ``0`` grades in the calling thread.
        extract: extraction strategies (see :class:`AnswerExtractor`), default the last
            ``\\boxed`` (with the boxes chained to it).
        preset: a named chain of strategies for a dataset or model family (``gsm8k``,
            ``math``, ``minerva``, ``r1``, ...; see :mod:`~forkgym.verifiers.presets`), instead
            of ``extract``.
        rewards: status -> reward map for policy statuses.
        fast_path: grade plain numbers exactly without sympy.
        cache_size: verdicts remembered per (reference, answer); 0 disables. Timeouts and
            errors are never cached.
        memory_limit_mb: address-space cap of each worker (a huge expression fails as
            ``timeout`` with reason ``memory_limit`` instead of swapping the machine).
        multi_box: how several boxes are graded. ``"list"`` (default): on both sides the final
            answer is the last box together with the boxes chained to it, and a list answer is
            compared as math-verify compares lists: a set (order and repeats ignored) unless
            written as a tuple. ``"parts"``: strict part-by-part grading; every box of the
            reference is one part, and the response must answer each, in order (its last as
            many boxes, or its one answer cut at top-level commas or semicolons).
            ``"last"``: the last box of each side alone.
        preempt_after_s: a call kept waiting while every worker holds a long item of a busier
            caller stops one that has run this many seconds and takes its worker; the item
            runs again later from the start, with its full limit, and is never preempted
            twice (see :mod:`~forkgym.verifiers.fair_slots`). None (default): never preempt.
    """

    name = "math"

    def __init__(
        self,
        timeout: float = 5.0,
        workers: int | None = None,
        *,
        extract: Iterable[str] = ("boxed",),
        preset: str | None = None,
        rewards: RewardMap = DEFAULT_REWARDS,
        fast_path: bool = True,
        cache_size: int = 4096,
        memory_limit_mb: int | None = 4096,
        float_rounding: int = 6,
        numeric_precision: int = 15,
        timeout_memory_s: float = 600.0,
        multi_box: str = "list",
        preempt_after_s: float | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if multi_box not in MULTI_BOX:
            raise ValueError(f"multi_box must be one of {MULTI_BOX}, got {multi_box!r}")
        # what a pickled copy is rebuilt from (the pool, locks and caches are not state)
        self._init_args = {
            "timeout": timeout, "workers": workers, "extract": tuple(extract), "preset": preset,
            "rewards": rewards,
            "fast_path": fast_path, "cache_size": cache_size, "memory_limit_mb": memory_limit_mb,
            "float_rounding": float_rounding, "numeric_precision": numeric_precision,
            "timeout_memory_s": timeout_memory_s, "multi_box": multi_box,
            "preempt_after_s": preempt_after_s,
        }  # fmt: skip
        if workers is None:
            workers = os.cpu_count() or 1
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        self.timeout = float(timeout)
        self.multi_box = multi_box
        self.workers = workers
        self.extractor = extractor_for(extract, preset, chain_boxes=multi_box != "last")
        self.rewards = rewards
        self.fast_path = fast_path
        self.cache_size = cache_size
        self.float_rounding = float_rounding
        self.numeric_precision = numeric_precision
        self._cache: OrderedDict[tuple[str, str], tuple[Status, dict[str, Any]]] = OrderedDict()
        self._cache_lock = threading.Lock()
        # (reference, answer) pairs that ran out of time, and until when that is remembered:
        # a retry of a pathological item is answered at once instead of costing the limit again
        self.timeout_memory_s = float(timeout_memory_s)
        self._timed_out: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._pool: WorkerPool | None = None
        # at most one item per worker in the pool; free workers go fairly to callers, and a
        # caller left waiting may take over a worker from a long item of a busier caller
        self._slots = FairSlots(max(workers, 1), preempt_after_s)
        if workers > 0:
            self._pool = WorkerPool(
                workers, preload=[_WORKER_MODULE], memory_limit_mb=memory_limit_mb
            )
            self._finalizer = weakref.finalize(self, self._pool.close)

    # -- pickling: a copy is a new verifier with the same settings (vector envs, forks) --------

    def __getstate__(self) -> dict[str, Any]:
        return {"init_args": self._init_args}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["init_args"])  # type: ignore[misc]

    # -- identity ------------------------------------------------------------------------------

    @cached_property
    def version(self) -> str:
        """Changes whenever a verdict could change: forkgym, math-verify and grading options."""
        from forkgym import __version__

        try:
            mv = _dist_version("math-verify")
        except PackageNotFoundError:  # pragma: no cover - a broken install
            mv = "unknown"
        return (
            f"forkgym-{__version__}+math-verify-{mv}"
            f";rules={GRADING_RULES};extract={self.extractor.describe()}"
            f";round={self.float_rounding};precision={self.numeric_precision}"
            f";multi_box={self.multi_box}"
        )

    @property
    def preemptions(self) -> int:
        """Items stopped so far to give their worker to another caller (and run again)."""
        return self._slots.preemptions

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> MathVerifier:
        """Start and warm the worker pool now rather than on the first symbolic answer."""
        if self._pool is not None:
            self._pool.start()
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> MathVerifier:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- grading -------------------------------------------------------------------------------

    def verify(self, reference: str, response: str) -> Outcome:
        """Grade one response. Never raises for odd content; raises TypeError for non-strings."""
        item = self._prepare(reference, response)
        todo = self._pending([item])
        if todo:
            self._grade_symbolic(todo)
        return self._outcome(item)

    def explain(self, reference: str, response: str) -> dict[str, Any]:
        """How one pair is graded, stage by stage, as plain data: what the reference is read
        as, what every extraction strategy finds in the response (the graded one marked
        ``chosen``), the exact texts math-verify parses, and the outcome."""
        outcome = self.verify(reference, response)
        extraction, attempts, stopped = self.extractor.explain(response)
        info: dict[str, Any] = {
            "preset": self.extractor.preset,
            "strategies": list(self.extractor.names),
            "after_think": self.extractor.after_think,
            "multi_box": self.multi_box,
        }
        parts = reference_parts(reference) if self.multi_box == "parts" else None
        if parts is not None:
            info["reference"] = {"parts": parts}
        else:
            ref = read_reference(reference, self.multi_box != "last")
            info["reference"] = {
                "answer": ref.text, "items": list(ref.items or []) or None, "plain": ref.plain,
                "note": ref.note,
                "parsed_as": None if ref.text is None else parser_input(ref.text, ref.plain),
            }  # fmt: skip
        info["response"] = {
            "no_answer_because": stopped,
            "attempts": [
                {"strategy": a.strategy, "found": a.answer, "span": list(a.span) if a.span else None,
                 "items": list(a.items) if a.items else None, "plain": a.plain, "chosen": a.chosen}
                for a in attempts
            ],
            "answer": extraction.answer,
            "strategy": extraction.strategy,
            "items": list(extraction.items) if extraction.items else None,
            "plain": extraction.plain,
            "parsed_as": None
            if extraction.answer is None or parts is not None
            else parser_input(extraction.answer, extraction.plain, extraction.raw),
        }  # fmt: skip
        info["outcome"] = outcome.to_dict()
        return info

    def verify_quick(self, reference: str, response: str) -> Outcome | None:
        """The outcome if extraction, the verdict cache or the fast path decide it, else None.

        Never waits for a worker, so an event loop can call it inline and send only the
        symbolic rest to :meth:`verify_many` in a thread.
        """
        item = self._prepare(reference, response)
        return None if self._pending([item]) else self._outcome(item)

    def verify_many(
        self,
        pairs: Iterable[Sequence[str]],
        *,
        budget_s: float | None = None,
        cancel: threading.Event | None = None,
        caller: Hashable | None = None,
    ) -> list[Outcome]:
        """Grade many ``(reference, response)`` pairs; outcomes come back in the same order.

        Identical pairs are graded once. The pool is shared fairly with concurrent calls
        (see :mod:`~forkgym.verifiers.fair_slots`): calls given the same ``caller`` count as
        one caller; a call given none is a caller of its own.
        """
        items = [self._prepare(reference, response) for reference, response in pairs]
        todo = self._pending(items)
        if todo:
            deadline = None if budget_s is None else time.monotonic() + budget_s
            self._grade_symbolic(todo, deadline=deadline, cancel=cancel, caller=caller)
        return [self._outcome(item) for item in items]

    def _prepare(self, reference: str, response: str) -> _Item:
        """Stages 1 and 2; leaves ``status`` unset when the pool has to decide."""
        if not isinstance(reference, str) or not isinstance(response, str):
            raise TypeError(
                "reference and response must be str, got "
                f"{type(reference).__name__} and {type(response).__name__}"
            )
        item = _Item(start=time.perf_counter())
        parts = reference_parts(reference) if self.multi_box == "parts" else None
        if parts is not None:
            return self._prepare_parts(item, parts, response)
        ref = read_reference(reference, self.multi_box != "last")
        item.note = ref.note
        if ref.text is None:
            return self._done(item, Status.ERROR, {"reason": "reference_unparseable"})
        found = self.extractor(response)
        item.extracted, item.strategy, item.span = found.answer, found.strategy, found.span
        if found.answer is None:
            return self._done(item, Status.INVALID, {"reason": found.reason})
        return self._judge(item, ref.text, found.answer, ref.plain, found.plain, found.raw)

    def _judge(
        self,
        item: _Item,
        ref: str,
        answer: str,
        ref_plain: bool = False,
        plain: bool = False,
        raw: bool = False,
    ) -> _Item:
        """The fast path, the timeout memory and the verdict cache; unset status = symbolic.
        (The fast path goes first: what it decides never reaches the pool, so it is never in
        the cache or the timeout memory.)"""
        if self.fast_path:
            verdict = fast_compare(ref, answer)
            if verdict is not None:
                status = Status.CORRECT if verdict else Status.INCORRECT
                return self._done(item, status, {"path": "fast"})
        item.key = (parser_input(ref, ref_plain), parser_input(answer, plain, raw))
        if self.timeout_memory_s > 0:
            with self._cache_lock:
                until = self._timed_out.get(item.key)
            if until is not None and time.monotonic() < until:
                details = {"reason": "time_limit", "limit_s": self.timeout, "path": "timeout_memory"}  # fmt: skip
                return self._done(item, Status.TIMEOUT, details)
        if self.cache_size:
            with self._cache_lock:
                hit = self._cache.get(item.key)
                if hit is not None:
                    self._cache.move_to_end(item.key)
            if hit is not None:
                return self._done(item, hit[0], {**hit[1], "path": "cache"})
        item.prepared = time.perf_counter()
        return item

    def _prepare_parts(self, item: _Item, refs: list[str], response: str) -> _Item:
        """A multi-part reference: the response's answers, one per part (``multi_box="parts"``)."""
        if not all(refs):
            return self._done(item, Status.ERROR, {"reason": "reference_unparseable"})
        scope, offset, reason = self.extractor.scope(response)
        if reason is not None:
            return self._done(item, Status.INVALID, {"reason": reason, "parts": len(refs)})
        boxes: list[tuple[str, tuple[int, int]]] = []  # (content, span), repeats collapsed
        for a, b in boxed_spans(scope) if "box" in scope else []:
            content = read_math(scope[a:b])[0]
            if not boxes or boxes[-1][0] != content:
                boxes.append((content, (a, b)))
        plain = False
        if len(boxes) >= len(refs):
            answers = [content for content, _ in boxes[-len(refs) :]]
            first, last = boxes[-len(refs)][1], boxes[-1][1]
            item.strategy, item.span = "boxed_parts", (offset + first[0], offset + last[1])
        else:
            found: Extraction = self.extractor(response)
            if found.answer is None:
                return self._done(item, Status.INVALID, {"reason": found.reason, "parts": len(refs)})  # fmt: skip
            answers = list(found.items) if found.items else split_parts(found.answer)
            item.strategy, item.span, plain = found.strategy, found.span, found.plain
        item.extracted = ", ".join(answers)
        if len(answers) != len(refs) or not all(answers):
            details = {"reason": "parts_missing", "parts": len(refs), "answered": len(answers)}
            return self._done(item, Status.INCORRECT, details)
        item.parts = [
            self._judge(_Item(start=item.start), ref, answer, plain=plain and len(answers) == 1)
            for ref, answer in zip(refs, answers, strict=True)
        ]
        self._combine(item)
        return item

    def _combine(self, item: _Item) -> None:
        """A multi-part verdict once every part has one: incorrect if any part is, else a
        timeout or error if any part had one (nothing can be concluded), else correct."""
        assert item.parts is not None
        if any(p.status is None for p in item.parts):
            return
        statuses = [p.status for p in item.parts]
        for status in (Status.INCORRECT, Status.TIMEOUT, Status.ERROR, Status.CORRECT):
            if status in statuses:
                break
        details = {"parts": [s.value for s in statuses], "path": "parts"}  # type: ignore[union-attr]
        item.queued_s = max(p.queued_s for p in item.parts)
        self._done(item, status, details)
        item.end = max(item.end, *(p.end for p in item.parts))  # type: ignore[type-var]

    def _pending(self, items: list[_Item]) -> dict[tuple[str, str], list[_Item]]:
        """What is left for the workers, by key (a multi-part item's undecided parts)."""
        todo: dict[tuple[str, str], list[_Item]] = {}
        for item in items:
            for part in item.parts or [item]:
                if part.status is None:
                    todo.setdefault(part.key, []).append(part)  # type: ignore[arg-type]
        return todo

    @staticmethod
    def _done(item: _Item, status: Status, details: dict[str, Any]) -> _Item:
        item.status, item.details, item.end = status, details, time.perf_counter()
        return item

    def _grade_symbolic(
        self,
        todo: dict[tuple[str, str], list[_Item]],
        deadline: float | None = None,
        cancel: threading.Event | None = None,
        caller: Hashable | None = None,
    ) -> None:
        """Stage 3 for every distinct pending key; fills in the waiting items.

        Past ``deadline`` (``time.monotonic()``), or once ``cancel`` is set, nothing more is
        started, the items in the workers are stopped (their workers replaced) and every
        item left is a ``timeout`` with reason ``request_budget`` (or ``cancelled``)."""
        if self._pool is None:
            for key, waiting in todo.items():
                self._mark_started(waiting)
                try:
                    status, details = self._grade_inline(key)
                except Exception as exc:  # an inline crash is this item's error, not the caller's
                    status, details = failure_status(exc, None)
                self._resolve(key, waiting, Status(status), details)
            return

        pending = deque(todo)  # not started yet
        again: deque[tuple[str, str]] = deque()  # preempted: to run again from the start
        in_flight: dict[Future, tuple[tuple[str, str], Ticket]] = {}
        lane = object()  # this call's turn in the pool, shared fairly with concurrent calls
        try:
            while pending or again or in_flight:
                self._start_turns(todo, pending, again, in_flight, lane, caller)
                done: set[Future] = set()
                if in_flight:
                    polling = pending or again or cancel is not None or self._slots.preempt_after
                    wait_s = 0.05 if polling else None
                    if deadline is not None:
                        left = max(0.0, deadline - time.monotonic())
                        wait_s = left if wait_s is None else min(wait_s, left)
                    done, _ = wait(in_flight, timeout=wait_s, return_when=FIRST_COMPLETED)
                    # a preempted item's future is done once stopped, whether or not the pool
                    # has told its waiters yet
                    done |= {f for f, (_, t) in in_flight.items() if t.preempted and f.done()}
                stop = "cancelled" if cancel is not None and cancel.is_set() else None
                if stop is None and deadline is not None and time.monotonic() >= deadline:
                    stop = "request_budget"
                if stop is not None and not done:
                    self._stop(todo, [*again, *pending], in_flight, stop)
                    return
                for future in done:
                    key, ticket = in_flight.pop(future)
                    self._slots.release(ticket)
                    if ticket.preempted and future.cancelled():  # its slot went to another caller
                        again.append(key)
                        continue
                    try:
                        status, details = future.result()
                        status = Status(status)
                    except BaseException as exc:
                        status, details = failure_status(exc, self.timeout)
                    self._resolve(key, todo[key], status, details)
        finally:
            self._slots.leave(lane)

    def _start_turns(
        self,
        todo: dict[tuple[str, str], list[_Item]],
        pending: deque[tuple[str, str]],
        again: deque[tuple[str, str]],
        in_flight: dict[Future, tuple[tuple[str, str], Ticket]],
        lane: object,
        caller: Hashable | None,
    ) -> None:
        """Start what this call's turn allows (a rerun first when the reruns allow it); block
        (briefly) only with nothing running."""
        assert self._pool is not None
        while pending or again:
            ticket = self._slots.acquire(
                lane,
                caller,
                fresh=bool(pending),
                rerun=bool(again),
                timeout=0 if in_flight else 0.05,
            )
            if ticket is None:
                return
            key = (again if ticket.rerun else pending).popleft()
            self._mark_started(todo[key])
            try:
                future = self._pool.submit(
                    _grade_in_worker,
                    *key,
                    self.float_rounding,
                    self.numeric_precision,
                    timeout=self.timeout,
                )
            except Exception as exc:  # the pool cannot start: every item says so
                self._slots.release(ticket)
                self._resolve(key, todo[key], *failure_status(exc, self.timeout))
                continue
            self._slots.started(ticket, future.cancel)
            in_flight[future] = (key, ticket)

    def _stop(
        self,
        todo: dict[tuple[str, str], list[_Item]],
        pending: list[tuple[str, str]],
        in_flight: dict[Future, tuple[tuple[str, str], Ticket]],
        reason: str,
    ) -> None:
        """Stop the items in the workers and give every unfinished item ``reason``."""
        for future, (key, ticket) in in_flight.items():
            future.cancel()  # a running task's worker is stopped and replaced
            self._slots.release(ticket)
            self._resolve(key, todo[key], Status.TIMEOUT, {"reason": reason})
        for key in pending:
            self._mark_started(todo[key])
            self._resolve(key, todo[key], Status.TIMEOUT, {"reason": reason})

    @staticmethod
    def _mark_started(waiting: list[_Item]) -> None:
        """Time spent waiting behind other items of the batch is not this item's latency."""
        now = time.perf_counter()
        for item in waiting:
            item.queued_s = now - item.prepared

    def _grade_inline(self, key: tuple[str, str]) -> tuple[str, dict[str, Any]]:
        from .math_worker import grade

        return grade(*key, self.float_rounding, self.numeric_precision)

    def _resolve(
        self, key: tuple[str, str], waiting: list[_Item], status: Status, details: dict[str, Any]
    ) -> None:
        if status is Status.TIMEOUT and details.get("reason") == "time_limit" and self.timeout_memory_s > 0:  # fmt: skip
            with self._cache_lock:
                self._timed_out[key] = time.monotonic() + self.timeout_memory_s
                self._timed_out.move_to_end(key)
                while len(self._timed_out) > max(self.cache_size, 1024):
                    self._timed_out.popitem(last=False)
        if self.cache_size and status in _CACHEABLE:
            with self._cache_lock:
                self._cache[key] = (status, details)
                self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        for item in waiting:
            self._done(item, status, {**details, "path": "math_verify"})

    def _outcome(self, item: _Item) -> Outcome:
        if item.parts is not None and item.status is None:
            self._combine(item)
        assert item.status is not None and item.details is not None and item.end is not None
        details = dict(item.details)
        if item.note is not None:
            details["reference_note"] = item.note
        if item.strategy is not None:
            details["strategy"] = item.strategy
        if item.span is not None:
            details["span"] = list(item.span)  # where the graded answer sits in the response
        return Outcome.from_status(
            item.status,
            self.rewards,
            extracted=item.extracted,
            details=details,
            verifier=self.name,
            verifier_version=self.version,
            latency_ms=(item.end - item.start - item.queued_s) * 1e3,
        )

"""The text-environment base: a conversation as observation, the assistant's text as action.

Reproducibility contract (what every forkgym environment guarantees):

* ``reset(seed=s, options=o)`` makes the first observation and every hidden quantity a pure
  function of (env id, version, constructor kwargs, s, o), in any process and under any
  ``PYTHONHASHSEED``. The only randomness is the env's own ``np_random`` (reseeded by
  ``reset(seed=s)``, kept by ``reset()``, as in Gymnasium); a task is generated from its own
  generator, keyed by a 64-bit value drawn from ``np_random`` and recorded in the task id, so
  ``options={"task_id": ...}`` rebuilds the same task. Generator states are derived from
  their keys by :func:`derived_pcg64_state`.
* :meth:`get_state` returns a small JSON-serialisable dict (conversation, turn, episode data and
  the RNG state); :meth:`set_state` restores it; :meth:`fork` is a new env of the same
  configuration with the same state. A fork and its original produce identical trajectories
  under identical actions, which is what makes a greedy branch and K sampled branches of one
  task comparable.

Subclasses implement :meth:`generate_task` (or :meth:`sample_task_id` + :meth:`task_from_id`),
:meth:`respond` (what one assistant message does) and :meth:`gold_action`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from forkgym.keys import key_digest
from forkgym.verifiers import DEFAULT_REWARDS, Outcome, RewardMap, Status

from .grading import Verifier, default_verifier
from .spaces import DEFAULT_MAX_CHARS, UnicodeText, chat_observation_space
from .task import Task

__all__ = [
    "SPLITS",
    "TextEnv",
    "Turn",
    "content_split",
    "derived_pcg64_state",
    "observation_key",
    "on_side",
]

SPLITS = ("train", "eval")
MAX_SPLIT_DRAWS = 10_000  # task ids drawn at most for one reset into a split


def on_side(env_kwargs: Mapping[str, Any], side: str | None) -> dict[str, Any]:
    """``env_kwargs`` drawing only ``side``'s problems (None: as they are). A ``task_split``
    already there must agree."""
    kwargs = dict(env_kwargs)
    if side is None:
        return kwargs
    given = kwargs.get("task_split")
    if given is not None and given != side:
        raise ValueError(
            f"env_kwargs.task_split={given!r} where the {side} side is drawn; leave task_split "
            "out (held_out=true splits train and eval by content) or set held_out=false"
        )
    return {**kwargs, "task_split": side}


def content_split(content: str, eval_fraction: float) -> str:
    """``"eval"`` or ``"train"``: which side of the held-out partition a task falls on, by a
    hash of the problem it poses (:meth:`TextEnv.content_key`: the problem's parameters, or
    its normalised text), never by its seed. Every problem is on the same side in any env
    configuration, process or run, however it is worded, so a model is evaluated only on
    problems it never saw, in any form, as a training prompt or a demonstration."""
    text = " ".join(content.split()).encode()
    digest = hashlib.blake2b(text, digest_size=8, person=b"forkgym-split").digest()
    return "eval" if int.from_bytes(digest, "little") < eval_fraction * 2**64 else "train"


def observation_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """A digest of what the env has shown since the policy last spoke: every message after the
    last assistant one (the prompt at the start; a tool's reply later). Matching states by
    this text is what verl-agent's GiGPO does; :meth:`TextEnv.state_key` is the exact match."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    shown = [[m.get("role"), str(m.get("content"))] for m in messages[last + 1 :]]
    blob = json.dumps(shown).encode()
    return hashlib.blake2b(blob, digest_size=16, person=b"forkgym-text").hexdigest()


_ROLE_TITLES = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def derived_pcg64_state(*key: str | int) -> dict[str, Any]:
    """A PCG64 state (128-bit state and odd increment) derived from ``key``
    (:func:`forkgym.keys.key_digest`, the keying scheme of every random choice in forkgym).

    This is what ``SeedSequence`` is for (well-mixed, independent streams from structured keys,
    never ``seed + index``), at a tenth of its cost: building ``Generator(PCG64(SeedSequence
    (s)))`` takes 50-100 us here, a third of an arithmetic episode, and every reset needs two
    (the episode generator and the task's). Hashing the key's text and setting the state of a
    reused generator takes about 6 us. The mapping is platform-independent and fixed.
    """
    digest = key_digest(key, size=32, purpose=b"forkgym-rng")
    return {
        "bit_generator": "PCG64",
        "state": {
            "state": int.from_bytes(digest[:16], "little"),
            "inc": int.from_bytes(digest[16:], "little") | 1,
        },
        "has_uint32": 0,
        "uinteger": 0,
    }


class _Default:
    """Sentinel: keep the environment class's own system prompt."""


@dataclass
class Turn:
    """What the environment made of one assistant message.

    ``status`` is a :class:`Status` value when the episode ends, otherwise a step-level reason
    (``tool_ok``, ``tool_parse_error``, ``tool_error``, ``tool_timeout``, ``retry``).
    ``outcome`` set means the episode is over. ``span`` is the part of the action the env used.
    """

    status: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI-shaped, added to the assistant message
    outcome: Outcome | None = None
    span: tuple[int, int] | None = None
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(gym.Env[dict[str, Any], str]):
    """Base of every forkgym environment. See the module docstring for the contract."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    env_version: ClassVar[int] = 0
    task_prefix: ClassVar[str] = "task"
    system_prompt: ClassVar[str | None] = None
    # sentences a prompt may carry that say how to answer, not what the problem is (left out of
    # content_key, so an env with and without them splits its problems alike)
    instruction_texts: ClassVar[tuple[str, ...]] = ()
    # get_state() holds everything that decides the rest of the episode, so state_key() is an
    # exact digest of the world state; an env keeping state elsewhere (a live connection, a
    # stateful remote tool) sets False, and algorithms that match states refuse it
    exact_state: ClassVar[bool] = True

    def __init__(
        self,
        *,
        config: dict[str, Any],
        verifier: Verifier | None = None,
        rewards: RewardMap | Mapping[str, float] = DEFAULT_REWARDS,
        max_turns: int = 1,
        max_chars: int = DEFAULT_MAX_CHARS,
        render_mode: str | None = None,
        system_prompt: str | type[_Default] | None = _Default,
        task_split: str | None = None,
        eval_fraction: float = 0.2,
    ) -> None:
        """``task_split``: ``"train"`` or ``"eval"`` draws only tasks on that side of the
        content partition (:func:`content_split` of the prompt, ``eval_fraction`` of all texts
        on the eval side); None draws from every task."""
        if task_split is not None and task_split not in SPLITS:
            raise ValueError(f"task_split must be one of {SPLITS} or None, got {task_split!r}")
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction!r}")
        self.task_split, self.eval_fraction = task_split, eval_fraction
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        # `config` holds the subclass's own constructor kwargs: it fingerprints the env and
        # rebuilds it in fork(), so its keys must be the constructor's parameter names.
        self.config = dict(config)
        self.identity: dict[str, Any] = {}  # more of what decides tasks (e.g. a data file hash)
        if system_prompt is not _Default:  # None: no system message (short prompts for tiny models)
            self.system_prompt = system_prompt  # type: ignore[assignment]
        if not isinstance(rewards, RewardMap):  # {"invalid": -0.5} from a config file
            rewards = RewardMap.from_mapping(rewards)
        self._common = {
            "rewards": rewards,
            "max_turns": max_turns,
            "max_chars": max_chars,
            "system_prompt": system_prompt,
            "task_split": task_split,
            "eval_fraction": eval_fraction,
        }
        self.verifier = verifier
        self.rewards = rewards
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = chat_observation_space(max_chars)
        self.action_space = UnicodeText(min(max_chars, 16_384))
        self._task: Task | None = None
        self._messages: list[dict[str, Any]] = []
        self._turn = 0
        self._done = True
        self._episode: dict[str, Any] = {}
        self._task_rng = np.random.Generator(np.random.PCG64(0))

    # -- what subclasses provide ----------------------------------------------------------------

    def generate_task(self, rng: np.random.Generator, task_id: str) -> Task:
        """Build the task for ``task_id`` from its own generator (procedural envs)."""
        raise NotImplementedError

    def respond(self, action: str) -> Turn:
        """Handle one assistant message (already appended to the conversation)."""
        raise NotImplementedError

    def gold_action(self) -> str:
        """The next assistant message of a correct trajectory from the current state."""
        raise NotImplementedError

    def initial_episode(self, task: Task) -> dict[str, Any]:
        """Mutable, JSON-serialisable per-episode data (part of the state)."""
        return {}

    def sample_task_id(self, rng: np.random.Generator) -> str:
        return f"{self.task_prefix}-{int(rng.bit_generator.random_raw()):016x}"

    def task_from_id(self, task_id: str) -> Task:
        prefix, _, seed = str(task_id).rpartition("-")
        try:
            if prefix != self.task_prefix:
                raise ValueError
            value = int(seed, 16)
        except ValueError:
            raise ValueError(
                f"task_id {task_id!r} is not one of {type(self).__name__}'s ids "
                f"('{self.task_prefix}-<hex digits>', as reported in info['task_id'])"
            ) from None
        # Keyed by the env's prefix too, so tasks of different envs share no randomness. The
        # generator object is reused: it is only valid during generate_task.
        self._task_rng.bit_generator.state = derived_pcg64_state("task", self.task_prefix, value)
        return self.generate_task(self._task_rng, task_id)

    # -- identity -------------------------------------------------------------------------------

    @property
    def env_id(self) -> str:
        return self.spec.id if self.spec is not None else type(self).__name__

    @property
    def fingerprint(self) -> str:
        """Hash of what decides tasks: class, version and JSON-able constructor kwargs."""
        blob = json.dumps(
            {
                "class": f"{type(self).__module__}.{type(self).__qualname__}",
                "version": self.env_version,
                "config": self.config,
                "identity": self.identity,
                "max_turns": self.max_turns,
                "rewards": self.rewards.as_dict(),
                "system_prompt": self.system_prompt,
                # unsplit envs keep their fingerprint of before splits existed
                **(
                    {"task_split": [self.task_split, self.eval_fraction]} if self.task_split else {}
                ),
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def task(self) -> Task:
        if self._task is None:
            raise ResetNeeded("call reset() first")
        return self._task

    @property
    def turn(self) -> int:
        return self._turn

    def grader(self) -> Verifier:
        if self.verifier is None:
            self.verifier = default_verifier()
        return self.verifier

    # -- Gymnasium API --------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is None:
            super().reset(seed=None)  # keeps the generator, or seeds one from OS entropy
        else:  # Gymnasium's seeding semantics, without its SeedSequence cost (see the docstring)
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise gym.error.Error(f"seed must be a non-negative int, got {seed!r}")
            if self._np_random is None:
                self._np_random = np.random.Generator(np.random.PCG64(0))
            self._np_random.bit_generator.state = derived_pcg64_state("reset", seed)
            self._np_random_seed = seed
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}; supported: 'task_id'")
        self._begin(self._draw_task() if task_id is None else self.task_from_id(task_id))
        return self._observation(), {"task_id": self.task.task_id, "turn": 0, "status": None}

    def content_key(self, task: Task) -> str:
        """The problem itself, for the held-out partition: tasks that pose the same problem
        have one key, however they are worded. By default the prompt without
        :attr:`instruction_texts`, Unicode-normalised (NFKC), case-folded and with its
        whitespace collapsed; a procedural env whose tasks say one problem in several ways
        (``45 + 23`` and ``23 + 45``) keys them by their parameters instead."""
        text = task.prompt
        for sentence in self.instruction_texts:
            text = text.replace(sentence, " ")
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

    def _draw_task(self) -> Task:
        """The next task from ``np_random``: the first drawn on this env's side of the content
        partition (any task without a split). A pure function of the generator's state."""
        for _ in range(MAX_SPLIT_DRAWS):
            task = self.task_from_id(self.sample_task_id(self.np_random))
            side = self.task_split
            if side is None or content_split(self.content_key(task), self.eval_fraction) == side:
                return task
        raise RuntimeError(
            f"no {self.task_split!r} task in {MAX_SPLIT_DRAWS} draws: the task space is too small for "
            f"eval_fraction={self.eval_fraction}; give it more tasks or another eval_fraction"
        )

    def _begin(self, task: Task) -> None:
        self._task = task
        self._turn = 0
        self._done = False
        self._episode = self.initial_episode(task)
        self._messages = []
        if self.system_prompt:
            self._messages.append({"role": "system", "content": self.system_prompt})
        self._messages.append({"role": "user", "content": task.prompt})

    def step(self, action: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._task is None or self._done:
            raise ResetNeeded("the episode is over (or never started): call reset()")
        if not isinstance(action, str):
            raise TypeError(f"an action is the assistant's text (str), got {type(action).__name__}")
        self._turn += 1
        self._messages.append({"role": "assistant", "content": action})
        turn = self.respond(action)
        if turn.tool_calls:
            self._messages[-1]["tool_calls"] = turn.tool_calls
        self._messages.extend(turn.messages)
        if turn.outcome is None and self._turn >= self.max_turns:
            turn.outcome = self._ending(Status.TRUNCATED, reason="max_turns")
            turn.info["limit"] = "max_turns"
        return self._transition(turn)

    def truncate(self, reason: str) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """End the episode from outside as ``truncated`` (e.g. the policy hit its token budget)."""
        if self._task is None or self._done:
            raise ResetNeeded("the episode is over (or never started): call reset()")
        return self._transition(Turn(status=reason, outcome=self._ending(Status.TRUNCATED, reason)))

    def _ending(self, status: Status, reason: str) -> Outcome:
        """The env's own verdict (a budget ran out); its reward is set in ``_transition``."""
        return Outcome.from_status(status, details={"reason": reason}, verifier="env")

    def _transition(self, turn: Turn) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        info: dict[str, Any] = {
            "task_id": self.task.task_id,
            "turn": self._turn,
            "status": turn.status,
            "action_span": turn.span,
            **turn.info,
        }
        reward, terminated, truncated = 0.0, False, False
        outcome = turn.outcome
        if outcome is not None:
            self._done = True
            # The one place an outcome gets its reward: the verifier (or the env, for its own
            # endings) decided the status, this env's reward map prices it.
            reward = self.rewards.reward(outcome.status)
            if reward != outcome.reward:
                outcome = replace(outcome, reward=reward)
            truncated = outcome.status is Status.TRUNCATED
            terminated = not truncated
            # Gymnasium rewards are floats: infrastructure failures step 0.0, but the outcome
            # says reward=None and learners must read it, never the float.
            reward = 0.0 if outcome.reward is None else outcome.reward
            info.update(status=outcome.status.value, outcome=outcome, reward=outcome.reward)
        if self.render_mode == "human":
            self.render()
        return self._observation(), reward, terminated, truncated, info

    def grade(self, action: str) -> Outcome:
        """The verifier's verdict on ``action`` against the task's reference.

        Its status is what counts: when the verdict ends the episode, ``step`` prices it with
        this env's reward map (``info["outcome"].reward``); the verifier's own reward field is
        left as the verifier set it.
        """
        return self.grader().verify(self.task.answer, action)

    @staticmethod
    def answer_span(outcome: Outcome) -> tuple[int, int] | None:
        span = outcome.details.get("span")
        return (int(span[0]), int(span[1])) if span else None

    def _observation(self) -> dict[str, Any]:
        # copies, so a caller editing an observation cannot change the episode
        messages = tuple(copy.deepcopy(m) if "tool_calls" in m else dict(m) for m in self._messages)
        return {"messages": messages, "prompt": self.render_prompt(messages)}

    @staticmethod
    def render_prompt(messages: tuple[dict[str, str], ...] | list[dict[str, str]]) -> str:
        """Plain-text rendering for models without a chat template; ends with the cue."""
        parts = [f"{_ROLE_TITLES.get(m['role'], m['role'])}: {m['content']}" for m in messages]
        return "\n\n".join([*parts, "Assistant:"])

    def render(self) -> str | None:
        text = self.render_prompt(self._messages)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # -- state and forking ----------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Small, JSON-serialisable snapshot of everything that decides the rest of the episode."""
        state = {
            "env_id": self.env_id,
            "fingerprint": self.fingerprint,
            "rng": self.np_random.bit_generator.state,
            "task_id": None if self._task is None else self._task.task_id,
            "turn": self._turn,
            "done": self._done,
            "messages": self._messages,
            "episode": self._episode,
        }
        return json.loads(json.dumps(state))  # a deep copy that proves it is JSON

    def state_key_data(self) -> Any:
        """The per-episode data as :meth:`state_key` reads it: :meth:`initial_episode`'s dict
        as the episode left it. An env whose episode data records the same state in more than
        one form (a list of things done, in the order they were done) returns one canonical
        form of it here."""
        return self._episode

    def state_key(self) -> str:
        """A digest (32 hex digits) of the world state: what decides every later observation and
        reward whatever the policy does next. It covers the env's configuration (the
        fingerprint), the task, the turn (the turn budget and tool call ids depend on it),
        whether the episode is over, the per-episode data (:meth:`state_key_data`: progress,
        tool state) and the RNG state; it leaves out the wording of the conversation, so two
        branches that said the same thing in other words are in one state. A pure function
        of those values in any process (no Python ``hash``)."""
        if not self.exact_state:
            raise NotImplementedError(
                f"{type(self).__name__} keeps state outside get_state(): it has no exact state key"
            )
        state = {
            "fingerprint": self.fingerprint,
            "task_id": None if self._task is None else self._task.task_id,
            "turn": self._turn,
            "done": self._done,
            "episode": self.state_key_data(),
            "rng": self.np_random.bit_generator.state,
        }
        blob = json.dumps(state, sort_keys=True, default=str).encode()
        return hashlib.blake2b(blob, digest_size=16, person=b"forkgym-state").hexdigest()

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"state of {state.get('env_id')!r} (fingerprint {state.get('fingerprint')}) does "
                f"not fit this {self.env_id!r} (fingerprint {self.fingerprint}): same env id, "
                "version and constructor kwargs are required"
            )
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = copy.deepcopy(state["rng"])
        self._np_random = rng
        self._task = None if state["task_id"] is None else self.task_from_id(state["task_id"])
        self._turn = int(state["turn"])
        self._done = bool(state["done"])
        self._messages = copy.deepcopy(state["messages"])
        self._episode = copy.deepcopy(state["episode"])

    def fork(self) -> TextEnv:
        """A new env of the same configuration in the same state (shares the verifier)."""
        twin = type(self)(
            **self.config, **self._common, verifier=self.verifier, render_mode=self.render_mode
        )
        twin.spec = self.spec
        twin.set_state(self.get_state())
        return twin

"""Training premises no CPU's rounding can change.

A test about what a step does with its rewards (an update happens, a group is mixed, some
responses are accepted) must not rest on how many sums the warm model happens to get right:
that differs between CPUs, whose kernels round its weights differently. Two ways to fix the
premise instead:

* :data:`SIGNED_REWARDS`: every status the policy can cause has a non-zero reward, so with
  REINFORCE (no baseline) every response has a non-zero advantage and a learned critic has
  non-zero returns to fit, whatever the model answers;
* :class:`HalfPaid`: a verifier that pays a response by a hash of its text, not by its
  arithmetic: distinct responses are paid independently with probability 1/2, so a group of
  sampled responses is mixed, and some responses are paid, on any CPU that samples.
"""

from __future__ import annotations

import hashlib

from forkgym.verifiers import Outcome

SIGNED_REWARDS = {"correct": 1.0, "incorrect": -1.0, "invalid": -1.0, "truncated": -1.0}


class HalfPaid:
    """``verify(reference, response)``: correct when the first byte of the response's SHA-256
    is even, else incorrect (a stand-in for a grader whose verdicts do not track the model)."""

    def verify(self, reference: str, response: str) -> Outcome:
        even = hashlib.sha256(response.encode()).digest()[0] % 2 == 0
        return Outcome.from_status("correct" if even else "incorrect", verifier="half-paid")

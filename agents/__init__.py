"""Policies, group rollouts, critic-free estimators, token losses and the trainer.

Agents consume :class:`~forkgym.verifiers.Outcome` objects: infrastructure statuses
(``timeout``, ``error``) carry no reward and never enter a baseline or a loss.
"""

if __name__ != "forkgym.agents":  # imported as a top-level `agents` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.agents; install forkgym "
        "(`pip install -e .`) and import forkgym.agents instead of `agents`"
    )

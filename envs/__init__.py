"""Gymnasium text environments (math and tool use) with exactly reproducible, forkable resets.

Every environment grades final answers with the verifiers in :mod:`forkgym.verifiers` and
reports their :class:`~forkgym.verifiers.Status` in ``info``.
"""

if __name__ != "forkgym.envs":  # imported as a top-level `envs` from a source checkout
    raise ImportError(
        "this folder is the sub-package forkgym.envs; install forkgym "
        "(`pip install -e .`) and import forkgym.envs instead of `envs`"
    )

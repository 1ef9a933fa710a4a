"""The module PrimeIntellect's ``verifiers`` imports for the taskset id ``forkgym-prime``.

Its plugin loader (0.4) turns an id into a top-level module name (``forkgym-prime`` ->
``forkgym_prime``) and has no entry-point lookup, so this one module is installed beside the
``forkgym`` package; everything is in :mod:`forkgym.integrations.prime`.
"""

from forkgym.integrations.prime import ForkgymEnv, ForkgymTaskset, load_environment

__all__ = ["ForkgymEnv", "ForkgymTaskset", "load_environment"]

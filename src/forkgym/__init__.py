"""forkgym: reproducible text environments, honest verifiers and critic-free RL for LMs.

The sub-packages are ``forkgym.envs``, ``forkgym.verifiers``, ``forkgym.store``,
``forkgym.services`` and ``forkgym.agents``; this module holds only the version so that
``import forkgym`` stays cheap.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]

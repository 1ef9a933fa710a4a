"""The Python tool's sandbox: untrusted code in a fresh, isolated, limited process per call.

* :mod:`.local` runs a call on this machine (:func:`run_python`) and states the limits;
* :mod:`.runner` is the script that runs inside the sandbox (by path, standard library only);
* :mod:`.isolation` builds the walls (bubblewrap, seccomp), :mod:`.cgroups` the per-call
  cgroup, :mod:`.uid_slots` the per-call uid;
* :mod:`.remote` sends a call to a SandboxFusion-shaped service instead.
"""

from .local import SandboxLimits, SandboxResult, containment, run_python

__all__ = ["SandboxLimits", "SandboxResult", "containment", "run_python"]

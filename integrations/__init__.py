"""forkgym inside other training frameworks: the shapes they call, backed by forkgym's parts.

* :mod:`.verl`: verl's custom reward function, ``compute_score(data_source, solution_str,
  ground_truth, extra_info=None)``.
* :mod:`.openenv`: any forkgym env as an OpenEnv environment server (``create_app(env_id)``);
  needs ``forkgym[openenv]``.
* :mod:`.prime`: any forkgym env as a PrimeIntellect ``verifiers`` environment
  (``load_environment(env_id)``); needs ``forkgym[prime]``.

OpenRLHF's remote reward model is a route of the verifier service (``POST /get_reward``).
"""

if __name__ != "forkgym.integrations":  # imported as a top-level `integrations` from a checkout
    raise ImportError(
        "this folder is the sub-package forkgym.integrations; install forkgym "
        "(`pip install -e .`) and import forkgym.integrations instead of `integrations`"
    )

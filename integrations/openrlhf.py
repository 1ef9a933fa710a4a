"""OpenRLHF's reward-function form of ``--remote_rm_url``: forkgym's verifier service with a
token.

OpenRLHF (0.11) takes as ``--remote_rm_url`` either the address of a remote reward model,
which its client POSTs to with no header at all (right for a service without a token on a
private network), or the path of a Python file defining ``reward_func(queries, prompts,
labels)``, which it calls in a thread for each sample. This module is such a file: give
OpenRLHF its path and it sends OpenRLHF's request to ``$FORKGYM_VERIFIER_URL/get_reward``
(several replicas: comma-separated) with ``Authorization: Bearer $FORKGYM_TOKEN`` when the
variable is set, through :class:`~forkgym.services.VerifierClient` (retries with backoff, the
next replica on each retry), and returns the service's reply, which OpenRLHF reads as it
reads an HTTP reply (``scores``, ``rewards``, ``extra_logs``). A service that keeps failing
raises, and OpenRLHF logs the sample as unrewarded, as it does for its own HTTP client.
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["reward_func"]

_lock = threading.Lock()
_clients: dict[tuple[str, str | None], Any] = {}


def _client() -> Any:
    from forkgym.services.client import VerifierClient

    urls = os.environ.get("FORKGYM_VERIFIER_URL", "")
    if not urls.strip():
        raise RuntimeError("set FORKGYM_VERIFIER_URL to the verifier service's address")
    token = os.environ.get("FORKGYM_TOKEN") or None
    key = (urls, token)
    with _lock:
        if key not in _clients:
            replicas = [url.strip() for url in urls.split(",") if url.strip()]
            _clients[key] = VerifierClient(replicas, token=token)
        return _clients[key]


def reward_func(queries: list[str], prompts: list[str], labels: list[Any]) -> dict[str, Any]:
    """The service's ``/get_reward`` reply for OpenRLHF's samples (see the module doc)."""
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    return _client().request("POST", "/get_reward", json=body)

"""A training run placed on a Ray cluster: verifier replicas, generation workers, learner ranks.

Ray only places processes here; what runs in them is forkgym's own parts, talking the way they
do without Ray:

* a **verifier replica** is ``forkgym serve`` (uvicorn, the SQL store) in a child process of
  a Ray actor, on a free port; the learners grade through it with
  :class:`~forkgym.services.VerifierClient` (round-robin over the replicas, failing over);
  several replicas need one shared database (``db_url``: PostgreSQL);
* a **generation worker** is a Ray actor holding a generation backend (``transformers`` or
  ``vllm``) on its own copy of the model; the learner sees it as the ``ray`` backend
  (:class:`RayPolicy`), which sends requests to it and pushes the weights after each update
  (one ``ray.put`` of the state dict per push, however many workers read it);
* a **learner rank** is a Ray task running :class:`~forkgym.agents.run.trainer.Trainer` with that
  backend and ``verifier_url`` set to the replicas; several ranks form a
  ``torch.distributed`` group (gloo on CPU, NCCL on GPUs) exactly as under ``torchrun``; with
  L ranks and N workers, rank r generates on workers r, r + L, ... (a pool when several), or on
  worker r mod N when there are fewer workers than ranks.

:func:`launch` starts all of it, runs the training, and tears every actor down (the replicas'
server processes with them) whether the run succeeds or not. ``forkgym launch`` is the command
line. Without Ray, the same layout is ``forkgym serve`` + ``torchrun -m forkgym train``
(docs/integrations/ray.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from forkgym.agents.generation.backends.policy import Generation, GenerationRequest, Policy
from forkgym.agents.generation.backends.registry import BACKENDS, Backend, build_policy
from forkgym.agents.generation.engine_pool import EnginePool
from forkgym.agents.run.config import TrainConfig
from forkgym.agents.seeds import engine_seed

try:
    import ray
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("forkgym.integrations.ray needs Ray: pip install 'forkgym[ray]'") from exc

__all__ = ["Layout", "RayPolicy", "launch"]

NAMESPACE = "forkgym"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The server child gets SIGTERM when the actor's process dies, however it dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@ray.remote
class VerifierReplica:
    """``forkgym serve`` in a child process; :meth:`url` once it listens."""

    def __init__(
        self, db_url: str, workers: int, processes: int, timeout: float, token: str | None
    ) -> None:
        from forkgym.services.server import spawn

        env = {**os.environ, **({"FORKGYM_TOKEN": token} if token else {})}
        args = ("--workers", str(workers), "--processes", str(processes), "--timeout", str(timeout))  # fmt: skip
        self.process, self._url = spawn(db_url, *args, env=env, preexec_fn=_die_with_parent)

    def url(self) -> str:
        return self._url

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@ray.remote
class GenerationWorker:
    """A generation backend on its own copy of the model, behind the Policy calls."""

    def __init__(
        self,
        model: str,
        backend: str,
        options: dict[str, Any],
        device: str,
        seed: int,
        threads: int | None,
    ) -> None:
        from forkgym.agents.models import load_policy_model

        if threads:
            torch.set_num_threads(threads)
        module, tokenizer = load_policy_model(model, device=device)
        self.policy = build_policy(backend, module, tokenizer, device=device, seed=seed, **options)

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return self.policy.generate(requests)

    def logprobs(
        self, sequences: list[list[int]], starts: list[int], temperature: float
    ) -> list[torch.Tensor]:
        return self.policy.logprobs(sequences, starts, temperature)

    def sync_weights(self, state: dict[str, torch.Tensor], version: int | None) -> dict[str, float]:
        return dict(self.policy.sync_weights(state, version=version) or {})

    def weight_version(self) -> int:
        return self.policy.weight_version


class RayPolicy(Policy):
    """The learner's side of one :class:`GenerationWorker` (found by its actor name)."""

    def __init__(self, worker: str) -> None:
        self.worker = ray.get_actor(worker, namespace=NAMESPACE)
        self._version = int(ray.get(self.worker.weight_version.remote()))

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return ray.get(self.worker.generate.remote(list(requests)))

    def logprobs(
        self, sequences: Sequence[Sequence[int]], starts: Sequence[int], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        return ray.get(
            self.worker.logprobs.remote([list(s) for s in sequences], list(starts), temperature)
        )

    def sync_weights(
        self, weights: torch.nn.Module | Mapping[str, Any] | None = None, version: int | None = None
    ) -> dict[str, float]:
        if isinstance(weights, torch.nn.Module):
            weights = weights.state_dict()
        state = ray.put({k: v.detach().cpu() for k, v in (weights or {}).items()})
        stats = ray.get(self.worker.sync_weights.remote(state, version))
        self._version = self._version + 1 if version is None else int(version)
        return stats


@BACKENDS.register("ray")
class RayBackend(Backend):
    """The ``ray`` backend: the named :class:`GenerationWorker` actors (several: a pool), each
    with weights of its own."""

    @classmethod
    def build(
        cls,
        model: torch.nn.Module | None,
        tokenizer: Any,
        *,
        device: str,
        seed: int,
        workers: Sequence[str] = (),
    ) -> Policy:
        if not workers:
            raise ValueError("the ray backend needs the names of its generation workers (workers=)")  # fmt: skip
        if not ray.is_initialized():
            ray.init(address="auto", namespace=NAMESPACE)
        engines = [RayPolicy(name) for name in workers]
        return engines[0] if len(engines) == 1 else EnginePool(engines, seed=seed)


@dataclass
class Layout:
    """How many of each part, and what each is given."""

    learners: int = 1
    generation_workers: int = 1
    verifier_replicas: int = 1
    db_url: str | None = None  # the replicas' store (None: SQLite in the run folder; 1 replica)
    verifier_workers: int = 1  # grading processes per uvicorn process
    verifier_processes: int = 1  # uvicorn processes per replica (`forkgym serve --processes`)
    verifier_timeout: float = 5.0
    cpus: dict[str, float] = field(
        default_factory=lambda: {"learner": 1.0, "generation": 1.0, "verifier": 1.0}
    )  # Ray's logical CPUs each part reserves
    gpus_per_learner: float = 0.0
    gpus_per_generation_worker: float = 0.0

    def cpus_needed(self) -> float:
        cpus = self.cpus
        return (
            self.learners * cpus["learner"]
            + self.generation_workers * cpus["generation"]
            + self.verifier_replicas * cpus["verifier"]
        )

    def check(self) -> None:
        if min(self.learners, self.generation_workers, self.verifier_replicas, self.verifier_workers, self.verifier_processes) < 1:  # fmt: skip
            raise ValueError("a layout needs at least one learner, generation worker and replica")
        if self.verifier_replicas > 1 and (self.db_url is None or self.db_url.startswith("sqlite")):
            raise ValueError(
                "several verifier replicas need one shared database: db_url=postgresql+psycopg://..."
            )


@ray.remote
class LearnerRank:
    """One learner rank: the trainer, in a process group when there are several."""

    def address(self) -> tuple[str, int]:
        """Where rank 0's process group listens: this node, a free port."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def train(
        self, config: dict[str, Any], rank: int, world: int, master: tuple[str, int], resume: bool
    ) -> dict[str, Any]:
        from forkgym.agents.run.trainer import Trainer

        if world > 1:
            os.environ.update(
                {
                    "RANK": str(rank),
                    "LOCAL_RANK": "0",
                    "WORLD_SIZE": str(world),
                    "MASTER_ADDR": master[0],
                    "MASTER_PORT": str(master[1]),
                }
            )
        return Trainer(TrainConfig.from_dict(config), resume=resume).run()


def launch(
    config: TrainConfig,
    layout: Layout | None = None,
    *,
    address: str | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run ``config`` on the Ray cluster at ``address`` (None: the one this process has joined,
    else a new local one); the last step's metrics of rank 0. Every actor is gone afterwards.
    ``resume`` continues the run in ``config.out`` from its latest checkpoint (the workers
    take the checkpoint's weights with the first push)."""
    layout = layout or Layout()
    layout.check()
    need = layout.cpus_needed()
    started_here = not ray.is_initialized()
    if started_here:
        local = address is None  # a new single-node cluster: give it a CPU token per part
        cpus = max(os.cpu_count() or 1, math.ceil(need)) if local else None
        ray.init(address=address, namespace=NAMESPACE, num_cpus=cpus)
    run = os.path.basename(os.path.normpath(config.out))
    actors: list[Any] = []
    replicas: list[Any] = []
    try:
        have = ray.cluster_resources().get("CPU", 0.0)
        if have < need:  # Ray would wait forever for a place to put the last part
            raise RuntimeError(
                f"the layout reserves {need:g} CPUs (Layout.cpus per part) and the cluster has "
                f"{have:g}: add nodes, or reserve less per part"
            )
        db_url = layout.db_url
        if db_url is None:
            os.makedirs(config.out, exist_ok=True)
            db_url = f"sqlite:///{os.path.abspath(os.path.join(config.out, 'verifier.db'))}"
        replicas = [
            VerifierReplica.options(num_cpus=layout.cpus["verifier"]).remote(
                db_url,
                layout.verifier_workers,
                layout.verifier_processes,
                layout.verifier_timeout,
                os.environ.get("FORKGYM_TOKEN"),
            )
            for _ in range(layout.verifier_replicas)
        ]
        urls = ray.get([r.url.remote() for r in replicas])
        tag = uuid.uuid4().hex[:8]  # several launches may share a cluster
        names = [f"{run}-generate-{i}-{tag}" for i in range(layout.generation_workers)]
        # what the workers run: the config's backend (a config already on `ray`: transformers)
        inner, options = config.backend, dict(config.backend_kwargs)
        if inner == "ray":
            inner, options = "transformers", {}
        for i, name in enumerate(names):
            actors.append(
                GenerationWorker.options(
                    name=name,
                    namespace=NAMESPACE,
                    num_cpus=layout.cpus["generation"],
                    num_gpus=layout.gpus_per_generation_worker,
                ).remote(
                    config.model,
                    inner,
                    options,
                    config.device,
                    engine_seed(config.seed, i),
                    config.threads,
                )
            )
        ray.get([a.weight_version.remote() for a in actors])  # every worker is up
        learners = [
            LearnerRank.options(
                num_cpus=layout.cpus["learner"], num_gpus=layout.gpus_per_learner
            ).remote()
            for _ in range(layout.learners)
        ]
        actors += learners
        master = ray.get(learners[0].address.remote())
        futures = []
        for rank, learner in enumerate(learners):
            mine = names[rank :: layout.learners] or [names[rank % len(names)]]
            values = config.to_dict()
            values.update(
                backend="ray",
                backend_kwargs={"workers": mine},
                verifier_url=list(urls),
                generation_engines=1,  # the workers are the engines
                plugins=sorted({*config.plugins, __name__}),  # the run's config.yaml loads again
            )
            futures.append(learner.train.remote(values, rank, layout.learners, master, resume))
        return ray.get(futures)[0]
    finally:
        for replica in replicas:
            with contextlib.suppress(Exception):  # a dead replica's child died with it
                ray.get(replica.stop.remote(), timeout=60)
        for actor in [*actors, *replicas]:
            ray.kill(actor)
        if started_here:
            ray.shutdown()

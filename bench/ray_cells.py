"""A benchmark's runs placed on a Ray cluster (``forkgym bench --ray ADDRESS``).

Each cell (one method at one setting, one seed: a run of a sweep on a tuning seed, or a
reported run) is one Ray task asking for one CPU; it runs exactly what
:func:`~forkgym.bench.runner.run_cells` runs in a local process, with one torch thread, and
writes its run folder and ``done.json`` under ``--out``. The cluster runs as many cells at
once as it has CPUs.

What a cluster must offer: forkgym installed on every node (with the extras the methods
need), and ``--out`` on storage every node sees at the same path (NFS, a shared volume): a
run's folder is written where it ran, and the report is written from the driver. A cell that
finished where the driver cannot see it is an error that names the node. Resuming works as
without Ray: the rerun command skips every cell with a ``done.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    import ray
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("forkgym bench --ray needs Ray: pip install 'forkgym[ray]'") from exc

if TYPE_CHECKING:
    from .presets import Preset

# the runner's Cell and run_cell, passed in by bench/runner.py (a cell: plain, picklable data)
Cell = Any
RunCell = Callable[[Any, "Preset", Callable[[str], None]], None]

__all__ = ["run_cells_on_ray"]


def _cell_task(run_cell: RunCell, cell: Cell, preset: Preset) -> str:
    """On a worker: one cell with one torch thread; the node it ran on."""
    import socket

    import torch

    torch.set_num_threads(1)
    run_cell(cell, preset, print)
    return socket.gethostname()


def _absolute(cell: Cell) -> Cell:
    """The cell with its folder and warm start as absolute paths: a worker's working
    directory is not the driver's."""
    model = Path(cell.model)
    return dataclasses.replace(
        cell,
        folder=Path(cell.folder).resolve(),
        model=str(model.resolve()) if model.exists() else cell.model,
    )


def connect(address: str) -> None:
    """Join the cluster at ``address`` (anything ``ray.init`` takes: ``auto``, ``HOST:PORT``,
    ``ray://HOST:10001``), unless this process already joined one."""
    if not ray.is_initialized():
        ray.init(address=address, namespace="forkgym-bench", log_to_driver=False)


def run_cells_on_ray(
    cells: list[Cell],
    preset: Preset,
    log: Callable[[str], None],
    address: str,
    run_cell: RunCell,
) -> None:
    """Run ``cells`` as Ray tasks on the cluster at ``address``, each by ``run_cell(cell,
    preset, log)`` (the runner's, which writes the cell's ``done.json``), logging each as it ends. A
    cell that fails stops the benchmark (the cells in flight are cancelled); the finished
    ones keep their ``done.json`` and the rerun command resumes the rest."""
    if not cells:
        return
    connect(address)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    log(f"  {len(cells)} runs on the Ray cluster at {address} ({cpus} CPUs, one per run)")
    task = ray.remote(num_cpus=1, max_retries=0)(_cell_task)
    pending = {task.remote(run_cell, _absolute(cell), preset): cell for cell in cells}
    try:
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(ready)
            node = ray.get(ready)
            done = Path(cell.folder) / "done.json"  # run_cell's record, with the run's time
            if not done.exists():
                raise RuntimeError(
                    f"{cell.name} seed {cell.seed} finished on node {node}, but its folder "
                    f"{cell.folder} is not visible here: --out must be on storage every node "
                    "sees at the same path"
                )
            seconds = json.loads(done.read_text())["seconds"]
            log(f"  {cell.name} seed {cell.seed} done on {node} in {seconds:.0f} s")
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)

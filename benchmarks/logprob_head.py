"""The learner's log-prob head, fused against its plain autograd composition, in one run.

The head turns a micro-batch's logits into the scored tokens' log-probs (with gradients) and
the entropies (``forkgym.agents.learner.logprobs.selected_logprobs``). The baseline is the plain
composition it replaced (``lib.logprob_head.plain_selected_logprobs``): the
same operations, with autograd keeping a float32 copy of the scores and every temporary built
over the whole ``[B, L, V]``. Two shapes by default:

* ``worked-23``: the learner's head in ``benchmarks/trl_step_time.py``'s worked-answer case
  (64 rows x 22 scored positions, the tiny model's 1,024-token vocabulary, float32): time;
* ``qwen-vocab``: 8 rows x 128 positions of a 151,936-token vocabulary (Qwen2.5's) in
  bfloat16, where the head holds the step's largest tensors: peak memory.

Each (shape, head) runs in a fresh process (the CPU's peak is the process's peak resident
size; on CUDA, torch's peak allocation): the first pass gives the peak above the logits the
process already holds, then ``--repeats`` passes give the median seconds. Both heads'
gradients are checked equal (their sums are printed). Run:
``python benchmarks/logprob_head.py [--shapes worked-23,qwen-vocab] [--repeats 5] [--device cpu]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import torch
from lib.logprob_head import HEADS, head_inputs, head_pass

SHAPES = {  # rows, positions, vocabulary, dtype
    "worked-23": (64, 22, 1024, torch.float32),
    "qwen-vocab": (8, 128, 151_936, torch.bfloat16),
}


def child(shape: str, variant: str, repeats: int, device: str) -> dict:
    rows, positions, vocab, dtype = SHAPES[shape]
    logits, targets, weights = head_inputs(rows, positions, vocab, dtype, torch.device(device))
    first = head_pass(variant, logits, targets, weights)
    seconds = [head_pass(variant, logits, targets, weights)["seconds"] for _ in range(repeats)]
    return {
        "peak_bytes": first["peak_bytes"],
        "seconds": statistics.median(seconds),
        "checksum": first["checksum"],
        "logits_bytes": logits.numel() * logits.element_size(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--child", nargs=2, metavar=("SHAPE", "HEAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.repeats, args.device)))
        return 0
    mib = 2**20
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}")
    print(
        f"{'shape':12s} {'head':6s} {'s/pass':>9s} {'peak MiB':>9s} {'logits MiB':>10s}  grad sum"
    )
    for shape in args.shapes.split(","):
        results = {}
        for variant in ("plain", "fused"):
            cmd = [sys.executable, __file__, "--child", shape, variant]
            cmd += ["--repeats", str(args.repeats), "--device", args.device]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = results[variant] = json.loads(out.strip().splitlines()[-1])
            print(
                f"{shape:12s} {variant:6s} {r['seconds']:9.4f} {r['peak_bytes'] / mib:9.0f} "
                f"{r['logits_bytes'] / mib:10.0f}  {r['checksum']:.6g}"
            )
        plain, fused = results["plain"], results["fused"]
        same = plain["checksum"] == fused["checksum"]
        print(
            f"{'':12s} fused/plain: time {fused['seconds'] / plain['seconds']:.2f}x, "
            f"peak {fused['peak_bytes'] / max(plain['peak_bytes'], 1):.2f}x; "
            f"gradients {'equal' if same else 'DIFFER'}"
        )
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    assert set(HEADS) == {"plain", "fused"}
    sys.exit(main())

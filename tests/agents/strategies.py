"""Hypothesis strategies shared by the agents tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

VALUES = {
    "binary": st.sampled_from([0.0, 1.0]),
    "few": st.sampled_from([0.3, 0.35, 1 / 3, -0.5]),
    "float": st.floats(-5, 5, allow_nan=False, width=32),
}


@st.composite
def grids(draw, min_k: int = 2, all_valid: bool = False):
    """(rewards float64 [P, K], valid bool [P, K]); constant groups are frequent."""
    p = draw(st.integers(1, 6))
    k = draw(st.integers(min_k, 8))
    vals = VALUES[draw(st.sampled_from(sorted(VALUES)))]
    rows = draw(st.lists(st.lists(vals, min_size=k, max_size=k), min_size=p, max_size=p))
    ok = st.just(True) if all_valid else st.sampled_from([True, True, True, False])
    valid = draw(st.lists(st.lists(ok, min_size=k, max_size=k), min_size=p, max_size=p))
    return torch.tensor(rows, dtype=torch.float64), torch.tensor(valid)

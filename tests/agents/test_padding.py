import pytest
import torch

from forkgym.agents.padding import pad_sequences, padding_mask


def test_right_and_left_padding():
    rows = [[1, 2, 3], [4], []]
    assert pad_sequences(rows, value=9).tolist() == [[1, 2, 3], [4, 9, 9], [9, 9, 9]]
    assert pad_sequences(rows, value=9, left=True).tolist() == [[1, 2, 3], [9, 9, 4], [9, 9, 9]]
    assert pad_sequences(rows, width=4).tolist() == [[1, 2, 3, 0], [4, 0, 0, 0], [0, 0, 0, 0]]
    assert padding_mask([2, 0], 3).tolist() == [[True, True, False], [False, False, False]]
    assert padding_mask([1], 2, left=True).tolist() == [[False, True]]
    with pytest.raises(ValueError):
        pad_sequences([])


def test_float_rows_convert_like_one_tensor_call():
    rows = [[0.1, -2.5e-8], [1 / 3]]
    out = pad_sequences(rows, dtype=torch.float32)
    assert out.dtype == torch.float32
    assert torch.equal(out[0], torch.tensor(rows[0], dtype=torch.float32))
    assert out[1, 0] == torch.tensor(1 / 3, dtype=torch.float32) and out[1, 1] == 0

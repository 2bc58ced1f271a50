"""``TensorClass._from_tensordict``: tensordict's private builder that torchrl calls."""

from __future__ import annotations

import pytest
import torch

from tensorbox import TensorClass, TensorDict
from tensorbox.errors import TensorDictKeyError


class Text(TensorClass):
    prompt: str
    tokens: torch.Tensor
    tag: str = "t"

    def __post_init__(self) -> None:
        if self.tokens is not None and (self.tokens < 0).any():
            raise ValueError("negative token")


def test_missing_fields_read_none_and_shares_tensors() -> None:
    td = TensorDict(tokens=torch.arange(3), batch_size=[3])
    t = Text._from_tensordict(td)
    assert t.prompt is None and t.tag == "t" and t.tokens is td["tokens"]
    empty = Text._from_tensordict(TensorDict(batch_size=[2]))
    assert empty.batch_size == (2,) and empty.tokens is None
    empty.tokens = torch.zeros(2, 4)
    assert empty.tokens.shape == (2, 4)


def test_non_tensordict_and_post_init() -> None:
    t = Text._from_tensordict(TensorDict(batch_size=[]), {"prompt": "hi"})
    assert t.prompt == "hi"
    with pytest.raises(ValueError, match="negative token"):
        Text._from_tensordict(TensorDict(tokens=-torch.ones(2), batch_size=[2]))


def test_refuses_unknown_keys_and_non_containers() -> None:
    with pytest.raises(TensorDictKeyError, match=r"keys \['other'\] are not fields of Text"):
        Text._from_tensordict(TensorDict(other=torch.zeros(())))
    with pytest.raises(TypeError, match=r"Text\._from_tensordict expects a TensorDict, got dict"):
        Text._from_tensordict({"prompt": "x"})

"""What a type checker sees of tensorclasses: checked by mypy in tests/meta/test_typing.py.

Every ``assert_type`` must hold statically (mypy) and the file also runs (at
runtime ``assert_type`` returns its argument). Lines marked ``type: ignore[...]``
are calls the checker must refuse; mypy's ``warn_unused_ignores`` turns a missed
refusal into an error.

The ``TensorClass`` base form is fully typed: fields, the generated ``__init__``
(fields, then keyword-only ``batch_size`` and ``device``) and every container
method returning the class. The ``@tensorclass`` form gives the checker the fields
and their ``__init__`` parameters only: a class decorator cannot add base classes
for a type checker.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any, assert_type

import torch

import tensorbox
from tensorbox import BatchLoader, TensorDict
from tensorbox._tensorclass import TensorClass, field, tensorclass


class Obs(TensorClass):
    pixels: torch.Tensor
    reward: torch.Tensor
    tag: str = "train"


class Step(TensorClass, frozen=True):
    obs: Obs
    action: torch.Tensor
    extra: TensorDict | None = None
    notes: list[str] = field(default_factory=list)


@tensorclass
class Point:
    xy: torch.Tensor
    label: int = 0


class Record(TensorClass):
    data: torch.Tensor  # tensordict's saving guide names a field ``data``
    metadata: str


def check() -> None:
    o = Obs(torch.zeros(4, 2), torch.zeros(4), batch_size=[4])
    o2 = Obs(pixels=torch.zeros(4, 2), reward=torch.zeros(4), tag="v", batch_size=4, device="cpu")
    assert_type(o, Obs)
    assert_type(o2.pixels, torch.Tensor)
    assert_type(o.tag, str)
    assert_type(o.batch_size, torch.Size)
    assert_type(o.device, torch.device | None)
    r = Record(torch.zeros(3), metadata="m", batch_size=[])
    assert_type(r.data, torch.Tensor)
    assert_type(r.state_dict(), dict[str, torch.Tensor])

    # container methods return the user's class
    assert_type(o[0], Obs)
    assert_type(o[1:3], Obs)
    assert_type(o[torch.tensor([0, 1])], Obs)
    assert_type(o.apply(lambda t: t + 1), Obs)
    assert_type(o.to(torch.float16), Obs)
    assert_type(o.clone(), Obs)
    assert_type(o.reshape(2, 2), Obs)
    assert_type(o.unsqueeze(0).squeeze(0), Obs)
    assert_type(o.unbind(0), tuple[Obs, ...])
    assert_type(o == o, Obs)
    assert_type(o.replace(tag="x"), Obs)
    assert_type(Obs.from_tensordict(o.to_tensordict()), Obs)
    assert_type(o.to_tensordict(), TensorDict)
    assert_type(o.size(), torch.Size)
    assert_type(o.size(0), int)
    assert_type(len(o), int)
    assert_type(o.__getitems__([0, 1]), Obs)
    for row in o:
        assert_type(row, Obs)

    # stack/cat typed by their items (torch.stack's own signature says Tensor)
    assert_type(tensorbox.stack([o, o]), Obs)
    assert_type(tensorbox.stack((o, o), dim=1), Obs)
    assert_type(tensorbox.cat([o, o]), Obs)
    assert_type(tensorbox.stack([torch.zeros(2), torch.ones(2)]), torch.Tensor)
    assert_type(tensorbox.cat([torch.zeros(2), torch.ones(2)]), torch.Tensor)
    assert tensorbox.stack([o, o]).batch_size == (2, 4)
    assert tensorbox.cat([o, o]).batch_size == (8,)

    # a key gives Any, a batch index the container's own type
    td = TensorDict(a=torch.zeros(4, 3), n={"b": torch.zeros(4)}, batch_size=[4])
    assert_type(td[0], TensorDict)
    assert_type(td[:2], TensorDict)
    assert_type(td[..., 0], TensorDict)
    assert_type(td["a"], Any)
    assert_type(td["n", "b"], Any)
    assert_type(o["pixels"], Any)
    assert_type(tensorbox.stack([td, td]), TensorDict)

    # the loader's batches are of the dataset's type
    for b in BatchLoader(o, batch_size=2, shuffle=False, num_threads=1):
        assert_type(b, Obs)
        assert type(b) is Obs
    for bt in BatchLoader(td, batch_size=2, num_threads=1):
        assert_type(bt, TensorDict)

    with tempfile.TemporaryDirectory() as d:
        o.memmap(d)
        assert_type(Obs.load_memmap(d), Obs)
        assert_type(TensorDict.load_memmap(d), TensorDict)

    s = Step(o, torch.zeros(4), batch_size=[4])
    assert_type(s.obs, Obs)
    assert_type(s.extra, TensorDict | None)
    assert_type(s.notes, list[str])
    assert_type(s[0].obs, Obs)

    p = Point(torch.zeros(2), 1)
    assert_type(p, Point)
    assert_type(p.xy, torch.Tensor)
    assert_type(p.label, int)

    o.batch_size = [4]  # assignable: a sequence of ints reads back as torch.Size
    assert_type(o.batch_size, torch.Size)

    if TYPE_CHECKING:  # refused by the checker (and at runtime)
        Obs(torch.zeros(4, 2))  # type: ignore[call-arg]
        Obs(torch.zeros(4, 2), torch.zeros(4), "t", [4])  # type: ignore[call-arg]
        Obs(torch.zeros(4, 2), torch.zeros(4), tag=3)  # type: ignore[arg-type]
        s.action = torch.ones(4)  # type: ignore[misc]
        o.nope  # type: ignore[attr-defined]  # noqa: B018


if __name__ == "__main__":
    check()

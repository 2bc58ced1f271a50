"""The container's methods over ``nn.Module`` weights: the ``weights`` port.

``from_module``/``from_modules``/``to_module``/``state_dict``/``load_state_dict`` reach
:mod:`tensorbox.weights` through :func:`tensorbox._core.ports.weights`.

>>> import torch; from tensorbox import TensorDict
>>> sorted(TensorDict.from_module(torch.nn.Linear(2, 3)).keys())
['bias', 'weight']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self, overload

import torch
from torch import Tensor

from tensorbox._core import ports as _ports
from tensorbox._core.methods.base import MixinBase

__all__ = ["WeightsMethods"]


class WeightsMethods(MixinBase):
    """Mixin of ``TensorCollection``: module weights (the weights port)."""

    __slots__ = ()

    # ------------------------------------------------------------ model weights

    @classmethod
    def from_module(
        cls,
        module: torch.nn.Module,
        as_module: bool = False,
        *,
        non_persistent: bool = False,
        filter_empty: bool = True,
        use_state_dict: bool = False,
    ) -> Any:
        """Parameters and buffers of ``module``, nested by submodule, sharing storage.

        Submodules without tensors get no entry unless ``filter_empty=False``.
        ``use_state_dict=True`` takes the tensors ``module.state_dict()`` gives instead
        (what a module's state-dict hooks return, detached as ``state_dict()`` gives
        them: the values at the time of the call, even when a hook changes the module
        again afterwards).
        """
        weights = _ports.weights()

        if use_state_dict:
            out = cls._new_unsafe({}, torch.Size([]), None)
            for key, value in module.state_dict().items():
                out.set(tuple(key.split(".")), value)
            return out
        return weights.from_module(
            module, as_module=as_module, non_persistent=non_persistent, filter_empty=filter_empty
        )

    @classmethod
    def from_modules(
        cls,
        *modules: torch.nn.Module,
        as_module: bool = False,
        lazy_stack: bool = False,
        expand_identical: bool = False,
    ) -> Any:
        """The weights of several modules of one architecture, stacked on a new first dim,
        as tensordict does for model ensembles (``torch.vmap`` over ``to_module``).

        Each stacked parameter is a new ``nn.Parameter`` (a copy: an optimizer trains the
        stack, the modules keep their own weights); buffers are stacked as plain tensors.
        ``expand_identical=True`` gives a weight that every module shares (the same
        tensor object) as an expanded view of it instead of a copy, so that gradients
        reach the shared weight.

        >>> import torch; from tensorbox import TensorDict
        >>> w = TensorDict.from_modules(torch.nn.Linear(2, 3), torch.nn.Linear(2, 3))["weight"]
        >>> w.shape, type(w).__name__
        (torch.Size([2, 3, 2]), 'Parameter')
        """
        if lazy_stack:
            raise NotImplementedError(
                "from_modules(lazy_stack=True): tensorbox stacks are always dense; call it "
                "without lazy_stack (the modules must share one architecture)"
            )
        if not modules:
            raise ValueError("from_modules: pass at least one module")
        if as_module:
            raise NotImplementedError(
                "from_modules(as_module=True): stacked weights are copies, not parameters of "
                "a module; wrap the result yourself (tensorbox.weights.ParamTree)"
            )
        trees = [cls.from_module(m) for m in modules]
        out: Any = torch.stack([t.detach() for t in trees])
        n = len(trees)
        for key in trees[0].keys(True, True):
            first = trees[0].get(key)
            if not isinstance(first, Tensor):
                continue
            if expand_identical and all(t.get(key) is first for t in trees[1:]):
                out.set(key, first.expand(n, *first.shape))
            elif isinstance(first, torch.nn.Parameter):
                out.set(key, torch.nn.Parameter(out.get(key), first.requires_grad))
        return out

    def to_module(
        self,
        module: torch.nn.Module,
        *,
        inplace: bool = False,
        return_swap: bool = True,
        strict: bool = True,
        chunk_bytes: int | None = None,
        use_state_dict: bool = False,
        preserve_module_state: bool = True,
    ) -> Any:
        """Put these weights into ``module``; returns what was there before.

        ``use_state_dict=True`` goes through ``module.load_state_dict`` (its hooks run).
        ``preserve_module_state`` (default) keeps a parameter a parameter (a plain tensor
        goes in as an ``nn.Parameter`` over the same storage); ``False`` puts each tensor
        in as it is.
        """
        weights = _ports.weights()

        if use_state_dict:
            module.load_state_dict(self.state_dict(), strict=strict)
            return None

        return weights.to_module(
            self,  # a TensorCollection
            module,
            inplace=inplace,
            return_swap=return_swap,
            strict=strict,
            chunk_bytes=chunk_bytes,
            preserve_module_state=preserve_module_state,
        )

    @overload
    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        flatten: Literal[True] = True,
    ) -> dict[str, Tensor]: ...

    @overload
    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        *,
        flatten: bool,
    ) -> dict[str, Any]: ...

    def state_dict(
        self,
        destination: dict[str, Any] | None = None,
        prefix: str = "",
        keep_vars: bool = False,
        flatten: bool = True,
    ) -> dict[str, Any]:
        """A flat ``{"dotted.key": tensor}`` dict, as ``nn.Module.state_dict()``
        (tensordict's form: an ``OrderedDict`` with ``_metadata``; ``flatten=False``
        nests it, see ``tensorbox.weights.state_dict``).

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"layer": {"weight": torch.zeros(2)}}, batch_size=[])
        >>> list(td.state_dict())
        ['layer.weight']
        """
        weights = _ports.weights()

        return weights.state_dict(
            self,
            keep_vars=keep_vars,
            flatten=flatten,
            destination=destination,
            prefix=prefix,
        )

    def load_state_dict(
        self,
        state_dict: Mapping[str, Any],
        strict: bool = True,
        assign: bool = False,
        *,
        chunk_bytes: int | None = None,
    ) -> Self:
        """Copy a dotted-key state dict into the matching leaves (in chunks); with
        ``assign=True`` the state dict's tensors replace the leaves instead.

        >>> import torch; from tensorbox import TensorDict
        >>> td = TensorDict({"layer": {"weight": torch.zeros(2)}}, batch_size=[])
        >>> w = td["layer", "weight"]
        >>> _ = td.load_state_dict({"layer.weight": torch.ones(2)})
        >>> w.tolist()   # copied into the existing tensor
        [1.0, 1.0]
        """
        weights = _ports.weights()

        if assign:
            for key, value in state_dict.items():
                self.set(tuple(key.split(".")), value)
            return self
        weights.load_state_dict(self, state_dict, strict=strict, chunk_bytes=chunk_bytes)
        return self

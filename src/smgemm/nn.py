"""Modules: `Linear`, a drop-in `torch.nn.Linear` that runs on smgemm, and `swap_linears` for whole models.

    model = transformers.AutoModelForCausalLM.from_config(cfg).cuda().bfloat16()
    smgemm.nn.swap_linears(model, num_sms=100)               # every nn.Linear, in place, on <= 100 SMs
    smgemm.nn.swap_linears(model, filter=lambda name, m: "mlp" in name)

A module's `num_sms` / `schedule` (None: not set) win over an enclosing `smgemm.sm_budget(...)` block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .ops import linear
from .plan import SCHEDULES


def _check_knobs(num_sms: int | None, schedule: str | None) -> None:
    if num_sms is not None and (isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1):
        raise ValueError(f"num_sms must be None or an int >= 1, got {num_sms!r}")
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` computed by `smgemm.linear` (same parameters, state dict and initialisation).

    `num_sms` and `schedule` may be changed at any time (plain attributes); under torch.compile a change
    recompiles the module's graph.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 num_sms: int | None = None, schedule: str | None = None) -> None:
        _check_knobs(num_sms, schedule)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.num_sms = num_sms
        self.schedule = schedule

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, num_sms: int | None = None,
                    schedule: str | None = None) -> Linear:
        """A `Linear` that shares `module`'s weight and bias Parameters (no copy; training either trains both)."""
        if not isinstance(module, torch.nn.Linear):
            raise TypeError(f"module must be a torch.nn.Linear, got {type(module).__name__}")
        _check_knobs(num_sms, schedule)
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = module.in_features, module.out_features
        new.weight = module.weight
        new.bias = module.bias
        new.num_sms, new.schedule = num_sms, schedule
        new.train(module.training)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, num_sms=self.num_sms, schedule=self.schedule)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_sms={self.num_sms}, schedule={self.schedule}"


def swap_linears(
    model: torch.nn.Module,
    *,
    filter: Callable[[str, torch.nn.Linear], bool] | None = None,
    num_sms: int | None = None,
    schedule: str | None = None,
) -> list[str]:
    """Replace, in place, every `torch.nn.Linear` of `model` (exactly that type, not subclasses) for which
    `filter(qualified_name, module)` is true by an smgemm `Linear` sharing its parameters.

    Returns the qualified names replaced. A Linear that appears under several names (shared) becomes one smgemm
    Linear, still shared.
    """
    _check_knobs(num_sms, schedule)
    if isinstance(model, torch.nn.Linear):
        raise TypeError("model is itself a Linear: use smgemm.nn.Linear.from_linear(model)")
    swapped: dict[int, Linear] = {}
    names = []
    targets = [(name, parent, child_name, child)
               for name, parent in model.named_modules(remove_duplicate=False)
               for child_name, child in parent.named_children()]
    for parent_name, parent, child_name, child in targets:
        if type(child) is not torch.nn.Linear and id(child) not in swapped:
            continue
        qualified = f"{parent_name}.{child_name}" if parent_name else child_name
        if id(child) not in swapped:
            if filter is not None and not filter(qualified, child):
                continue
            swapped[id(child)] = Linear.from_linear(child, num_sms=num_sms, schedule=schedule)
        setattr(parent, child_name, swapped[id(child)])
        names.append(qualified)
    return names

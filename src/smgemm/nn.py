"""Modules: `Linear` (a drop-in `torch.nn.Linear` on smgemm), `MXFP4Linear`, and `swap_linears` for models.

    model = transformers.AutoModelForCausalLM.from_config(cfg).cuda().bfloat16()
    smgemm.nn.swap_linears(model, num_sms=100)               # every nn.Linear, in place, on <= 100 SMs
    smgemm.nn.swap_linears(model, filter=lambda name, m: "mlp" in name)

A module's `num_sms` / `schedule` (None: not set) win over an enclosing `smgemm.sm_budget(...)` block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._checks import check_knobs
from .mxfp4 import MXFP4Tensor, quantize_mxfp4
from .ops import linear


class Linear(torch.nn.Linear):
    """`torch.nn.Linear` computed by `smgemm.linear` (same parameters, state dict and initialisation).

    `num_sms` and `schedule` may be changed at any time (plain attributes); under torch.compile a change
    recompiles the module's graph.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 num_sms: int | None = None, schedule: str | None = None) -> None:
        check_knobs(schedule, num_sms)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.num_sms = num_sms
        self.schedule = schedule

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, num_sms: int | None = None,
                    schedule: str | None = None) -> Linear:
        """A `Linear` that shares `module`'s weight and bias Parameters (no copy; training either trains both)."""
        if not isinstance(module, torch.nn.Linear):
            raise TypeError(f"module must be a torch.nn.Linear, got {type(module).__name__}")
        check_knobs(schedule, num_sms)
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


class MXFP4Linear(torch.nn.Module):
    """A Linear whose frozen weight is stored in MXFP4 (4.25 bits per weight) and dequantized inside the kernel.

    Buffers `weight_data` (uint8 [N, K/2]) and `weight_scales` (uint8 [N, K/32]); `bias` stays a Parameter in the
    activation dtype. Gradients flow to the input (and bias), not to the quantized weight.
    """

    def __init__(self, weight: MXFP4Tensor, bias: torch.Tensor | None = None, *, num_sms: int | None = None,
                 schedule: str | None = None) -> None:
        super().__init__()
        check_knobs(schedule, num_sms)
        if not isinstance(weight, MXFP4Tensor) or weight.dim() != 2:
            raise TypeError("weight must be a 2-D MXFP4Tensor [N, K] (smgemm.quantize_mxfp4)")
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight_data", weight.data)
        self.register_buffer("weight_scales", weight.scales)
        self.bias = torch.nn.Parameter(bias) if bias is not None else None
        self.num_sms, self.schedule = num_sms, schedule

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, rounding: str = "floor", num_sms: int | None = None,
                    schedule: str | None = None) -> MXFP4Linear:
        """Quantize `module`'s weight (in_features a multiple of 32); the bias is shared with `module`."""
        if not isinstance(module, torch.nn.Linear):
            raise TypeError(f"module must be a torch.nn.Linear, got {type(module).__name__}")
        new = cls(quantize_mxfp4(module.weight.detach(), rounding=rounding), None, num_sms=num_sms,
                  schedule=schedule)
        new.bias = module.bias
        return new

    @property
    def weight(self) -> MXFP4Tensor:
        return MXFP4Tensor(self.weight_data, self.weight_scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, num_sms=self.num_sms, schedule=self.schedule)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mxfp4, num_sms={self.num_sms}, schedule={self.schedule}")


def swap_linears(
    model: torch.nn.Module,
    *,
    filter: Callable[[str, torch.nn.Linear], bool] | None = None,
    num_sms: int | None = None,
    schedule: str | None = None,
    mxfp4: bool = False,
) -> list[str]:
    """Replace, in place, every `torch.nn.Linear` of `model` (exactly that type, not subclasses) for which
    `filter(qualified_name, module)` is true by an smgemm `Linear` sharing its parameters (`mxfp4=True`: an
    `MXFP4Linear` with the weight quantized; frozen).

    Returns the qualified names replaced. A Linear that appears under several names (shared) becomes one smgemm
    Linear, still shared.
    """
    check_knobs(schedule, num_sms)
    if isinstance(model, torch.nn.Linear):
        raise TypeError("model is itself a Linear: use smgemm.nn.Linear.from_linear(model)")
    swapped: dict[int, torch.nn.Module] = {}
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
            cls = MXFP4Linear if mxfp4 else Linear
            swapped[id(child)] = cls.from_linear(child, num_sms=num_sms, schedule=schedule)
        setattr(parent, child_name, swapped[id(child)])
        names.append(qualified)
    return names

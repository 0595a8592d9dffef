"""Modules: `Linear` (a drop-in `torch.nn.Linear` on smgemm), `MXFP4Linear`, and `swap_linears` for models.

    model = transformers.AutoModelForCausalLM.from_config(cfg).cuda().bfloat16()
    smgemm.nn.swap_linears(model, num_sms=100)               # every nn.Linear, in place, on <= 100 SMs
    smgemm.nn.swap_linears(model, filter=lambda name, m: "mlp" in name)

A module's `num_sms` / `schedule` (None: not set) win over an enclosing `smgemm.sm_budget(...)` block.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import torch

from ._checks import check_knobs
from .mxfp4 import BLOCK, HOPPER_GROUP, LAYOUTS, MXFP4Tensor, quantize_mxfp4
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

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + "weight_data" in state_dict:
            raise RuntimeError(f"{prefix.rstrip('.') or 'the module'}: the checkpoint holds an MXFP4 weight for this "
                               "dense Linear; load it with smgemm.nn.load_mxfp4(model, checkpoint)")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_sms={self.num_sms}, schedule={self.schedule}"


def _default_layout(in_features: int) -> str:
    return "hopper" if in_features % (2 * HOPPER_GROUP) == 0 else "ocp"


class MXFP4Linear(torch.nn.Module):
    """A Linear whose frozen weight is stored in MXFP4 (4.25 bits per weight) and dequantized inside the kernel.

    Buffers `weight_data` (uint8 [N, K/2], bytes in `layout`) and `weight_scales` (uint8 [N, K/32]); `bias` stays a
    Parameter in the activation dtype. Gradients flow to the input (and bias), not to the quantized weight.

    `layout` (`mxfp4.LAYOUTS`): the byte layout the kernels read; None picks "hopper" (the fastest at M = 17-128; at
    M = 1 and 4 "kwords" takes 0.74-1.01x its time, at M = 9-16 0.91-1.04x, docs/performance.md) where in_features is
    a multiple of 128, else "ocp". The weight is converted once, here. A checkpoint (`state_dict`) always holds the
    "ocp" interchange bytes, so that it loads into a layer of any layout.
    """

    def __init__(self, weight: MXFP4Tensor, bias: torch.Tensor | None = None, *, num_sms: int | None = None,
                 schedule: str | None = None, layout: str | None = None) -> None:
        super().__init__()
        check_knobs(schedule, num_sms)
        if not isinstance(weight, MXFP4Tensor) or weight.dim() != 2:
            raise TypeError("weight must be a 2-D MXFP4Tensor [N, K] (smgemm.quantize_mxfp4)")
        self.out_features, self.in_features = weight.shape
        self.layout = _default_layout(self.in_features) if layout is None else layout
        weight = weight.to_layout(self.layout)
        self.register_buffer("weight_data", weight.data)
        self.register_buffer("weight_scales", weight.scales)
        self.bias = torch.nn.Parameter(bias) if bias is not None else None
        self.num_sms, self.schedule = num_sms, schedule

    @classmethod
    def empty(cls, in_features: int, out_features: int, bias: bool = True, *, dtype: torch.dtype = torch.bfloat16,
              device=None, num_sms: int | None = None, schedule: str | None = None,
              layout: str | None = None) -> MXFP4Linear:
        """A layer with zero MXFP4 buffers (and a zero `dtype` bias) to load a checkpoint into: nothing is
        quantized. `in_features` must be a multiple of 32."""
        if in_features % BLOCK:
            raise ValueError(f"in_features must be a multiple of {BLOCK} for MXFP4, got {in_features}")
        data = torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device)
        scales = torch.zeros(out_features, in_features // BLOCK, dtype=torch.uint8, device=device)
        b = torch.zeros(out_features, dtype=dtype, device=device) if bias else None
        return cls(MXFP4Tensor(data, scales), b, num_sms=num_sms, schedule=schedule, layout=layout)

    @classmethod
    def from_linear(cls, module: torch.nn.Linear, *, rounding: str = "floor", num_sms: int | None = None,
                    schedule: str | None = None, layout: str | None = None) -> MXFP4Linear:
        """Quantize `module`'s weight (in_features a multiple of 32); the bias is shared with `module`."""
        if not isinstance(module, torch.nn.Linear):
            raise TypeError(f"module must be a torch.nn.Linear, got {type(module).__name__}")
        new = cls(quantize_mxfp4(module.weight.detach(), rounding=rounding), None, num_sms=num_sms,
                  schedule=schedule, layout=layout)
        new.bias = module.bias
        return new

    @property
    def weight(self) -> MXFP4Tensor:
        """The buffers as one MXFP4Tensor: made once, and again when a buffer or the layout was replaced (`.to()`,
        `.cuda()`, assignment; a load copies into the same buffers), not on every forward (its checks cost host
        time). Traced calls make it afresh (nothing is stored while torch.compile traces)."""
        data, scales = self.weight_data, self.weight_scales
        if torch.compiler.is_compiling():
            return MXFP4Tensor(data, scales, self.layout)
        w = self.__dict__.get("_weight")
        if w is None or w.data is not data or w.scales is not scales or w.layout != self.layout:
            w = self.__dict__["_weight"] = MXFP4Tensor(data, scales, self.layout)
        return w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, num_sms=self.num_sms, schedule=self.schedule)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + "weight" in state_dict and prefix + "weight_data" not in state_dict:
            raise RuntimeError(f"{prefix.rstrip('.') or 'the module'}: the checkpoint holds a dense weight for this "
                               "MXFP4 layer; load it into the unswapped model, then swap_linears(..., mxfp4=True)")
        data, scales = state_dict.get(prefix + "weight_data"), state_dict.get(prefix + "weight_scales")
        if self.layout != "ocp" and isinstance(data, torch.Tensor) and isinstance(scales, torch.Tensor) and \
                tuple(data.shape) == tuple(self.weight_data.shape) and data.dtype == torch.uint8:
            state_dict = {**state_dict, prefix + "weight_data": MXFP4Tensor(data, scales).to_layout(self.layout).data}
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.layout != "ocp":  # checkpoints hold the interchange bytes
            destination[prefix + "weight_data"] = self.weight.to_layout("ocp").data

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"mxfp4 ({self.layout}), num_sms={self.num_sms}, schedule={self.schedule}")


class SwapReport(list):
    """The qualified names `swap_linears` replaced (a list), and in `skipped` those it left as they were, each with
    its reason."""

    skipped: dict[str, str]

    def __init__(self, names=(), skipped=None):
        super().__init__(names)
        self.skipped = dict(skipped or {})


def _layout_problem(in_features: int, layout: str | None) -> str | None:
    """Why an MXFP4 weight of `in_features` cannot be stored in `layout` (None: the default, which always can)."""
    if layout not in (None, "ocp") and in_features % (2 * HOPPER_GROUP):
        return f"in_features {in_features} is not a multiple of {2 * HOPPER_GROUP} (layout {layout!r})"
    return None


def _mxfp4_problem(module: torch.nn.Linear, shared: set[int], layout: str | None) -> str | None:
    """Why `module` cannot become an MXFP4Linear (its weight in `layout`; None: the default), or None."""
    if module.in_features % BLOCK:
        return f"in_features {module.in_features} is not a multiple of {BLOCK}"
    if (problem := _layout_problem(module.in_features, layout)) is not None:
        return problem
    if id(module.weight) in shared:
        return "its weight is tied to another module's parameter (quantizing would untie it)"
    if module.weight.dtype not in (torch.bfloat16, torch.float16):
        return (f"its weight is {module.weight.dtype}: MXFP4 layers take bf16 / fp16 activations (convert the model "
                "with .bfloat16() first)")
    return None


def swap_linears(
    model: torch.nn.Module,
    *,
    filter: Callable[[str, torch.nn.Linear], bool] | None = None,
    num_sms: int | None = None,
    schedule: str | None = None,
    mxfp4: bool = False,
    incompatible: str = "raise",
    layout: str | None = None,
) -> SwapReport:
    """Replace, in place, every `torch.nn.Linear` of `model` (exactly that type, not subclasses) for which
    `filter(qualified_name, module)` is true by an smgemm `Linear` sharing its parameters (`mxfp4=True`: an
    `MXFP4Linear` with the weight quantized; frozen).

    With `mxfp4=True` every chosen layer is checked before any is changed: its in_features must be a multiple of 32,
    its weight bf16 or fp16, and not tied to a parameter outside it (an lm_head sharing the embedding). A layer that
    fails raises ValueError naming it (`incompatible="raise"`), or stays as it is and is listed in the result's
    `skipped` (`incompatible="skip"`). `layout` (`mxfp4.LAYOUTS`): the byte layout of every MXFP4 weight; None picks
    per layer as `MXFP4Linear` does; "hopper" and "kwords" need in_features a multiple of 128 (checked as above).

    Returns the qualified names replaced (a `SwapReport`). A Linear that appears under several names (shared)
    becomes one smgemm Linear, still shared.
    """
    check_knobs(schedule, num_sms)
    if layout is not None and (not mxfp4 or layout not in LAYOUTS):
        raise ValueError(f"layout must be None, or with mxfp4=True one of {LAYOUTS}, got {layout!r}"
                         + ("" if mxfp4 else " without mxfp4=True"))
    if incompatible not in ("raise", "skip"):
        raise ValueError(f"incompatible must be 'raise' or 'skip', got {incompatible!r}")
    if isinstance(model, torch.nn.Linear):
        raise TypeError("model is itself a Linear: use smgemm.nn.Linear.from_linear(model)")
    targets = [(name, parent, child_name, child)
               for name, parent in model.named_modules(remove_duplicate=False)
               for child_name, child in parent.named_children()]
    chosen: dict[int, str] = {}
    for parent_name, _, child_name, child in targets:
        qualified = f"{parent_name}.{child_name}" if parent_name else child_name
        if type(child) is torch.nn.Linear and id(child) not in chosen and (filter is None or filter(qualified, child)):
            chosen[id(child)] = qualified
    skipped = {}
    if mxfp4:
        owners = {}  # parameter id -> the modules that hold it
        for module in model.modules():
            for p in module.parameters(recurse=False):
                owners.setdefault(id(p), set()).add(id(module))
        shared = {pid for pid, mods in owners.items() if len(mods) > 1}
        for _, _, _, child in targets:
            if id(child) in chosen:
                problem = _mxfp4_problem(child, shared, layout)
                if problem is not None:
                    if incompatible == "raise":
                        raise ValueError(f"{chosen[id(child)]}: cannot become an MXFP4 layer: {problem}")
                    skipped[chosen.pop(id(child))] = problem
    swapped: dict[int, torch.nn.Module] = {}
    names = []
    for parent_name, parent, child_name, child in targets:
        if id(child) not in chosen and id(child) not in swapped:
            continue
        if id(child) not in swapped:
            if mxfp4:
                swapped[id(child)] = MXFP4Linear.from_linear(child, num_sms=num_sms, schedule=schedule, layout=layout)
            else:
                swapped[id(child)] = Linear.from_linear(child, num_sms=num_sms, schedule=schedule)
        setattr(parent, child_name, swapped[id(child)])
        names.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return SwapReport(names, skipped)


def load_mxfp4(model: torch.nn.Module, checkpoint: dict[str, torch.Tensor] | str | os.PathLike, *,
               strict: bool = True, num_sms: int | None = None, schedule: str | None = None,
               layout: str | None = None) -> SwapReport:
    """Load a checkpoint of a model swapped with `swap_linears(..., mxfp4=True)` into a fresh, unswapped `model`:
    every `torch.nn.Linear` whose MXFP4 buffers (`<name>.weight_data`, `<name>.weight_scales`) the checkpoint holds
    becomes an empty `MXFP4Linear` (nothing is quantized), then `model.load_state_dict(state_dict, strict)` fills
    everything.

    `checkpoint`: a state dict (what `torch.load(path, weights_only=True)` or `safetensors.torch.load_file` returns),
    or where one was saved (`read_checkpoint`): a `torch.save` file, a `.safetensors` file, or the directory of a
    Hugging Face `save_pretrained`, sharded or not.

        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).bfloat16()
        smgemm.nn.load_mxfp4(model, path)

    Returns the qualified names turned into MXFP4 layers. A layer whose shape differs from the checkpoint's raises,
    naming it (as load_state_dict does). `layout`: the byte layout the layers store (as in `swap_linears`; a layer
    whose in_features the layout cannot hold raises, naming it).
    """
    check_knobs(schedule, num_sms)
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout must be None or one of {LAYOUTS}, got {layout!r}")
    state_dict = read_checkpoint(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else checkpoint
    names = []
    replaced: dict[int, torch.nn.Module] = {}
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent.named_children()):
            qualified = f"{parent_name}.{child_name}" if parent_name else child_name
            if type(child) is not torch.nn.Linear or qualified + ".weight_data" not in state_dict:
                continue
            if id(child) not in replaced:
                packed = state_dict[qualified + ".weight_data"]
                if tuple(packed.shape) != (child.out_features, child.in_features // 2):
                    raise ValueError(f"{qualified}: the checkpoint's weight_data is {tuple(packed.shape)}, the layer "
                                     f"needs {(child.out_features, child.in_features // 2)}")
                problem = _layout_problem(child.in_features, layout)
                if problem is not None:
                    raise ValueError(f"{qualified}: {problem}")
                replaced[id(child)] = MXFP4Linear.empty(
                    child.in_features, child.out_features, child.bias is not None, dtype=child.weight.dtype,
                    device=child.weight.device, num_sms=num_sms, schedule=schedule, layout=layout)
            setattr(parent, child_name, replaced[id(child)])
            names.append(qualified)
    model.load_state_dict(state_dict, strict=strict)
    return SwapReport(names)


# What `read_checkpoint` looks for in a directory, in this order: Hugging Face's file names for an index of shards or
# one file, safetensors first.
_CHECKPOINT_FILES = ("model.safetensors.index.json", "model.safetensors", "pytorch_model.bin.index.json",
                     "pytorch_model.bin")


def read_checkpoint(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict saved at `path`, on the CPU: a `.safetensors` file, a `torch.save` file (read with
    `weights_only=True`), or a directory holding one of `_CHECKPOINT_FILES` (what `save_pretrained` writes; an index
    names the shards, whose tensors are merged). safetensors files need the `safetensors` package."""
    path = os.fspath(path)
    if os.path.isdir(path):
        found = next((name for name in _CHECKPOINT_FILES if os.path.isfile(os.path.join(path, name))), None)
        if found is None:
            raise FileNotFoundError(f"{path}: no checkpoint in this directory (looked for "
                                    f"{', '.join(_CHECKPOINT_FILES)})")
        if not found.endswith(".index.json"):
            return read_checkpoint(os.path.join(path, found))
        with open(os.path.join(path, found)) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(read_checkpoint(os.path.join(path, shard)))
        return state
    if path.endswith(".safetensors"):
        try:
            from safetensors.torch import load_file
        except ImportError as e:
            raise ImportError(f"{path}: reading a .safetensors checkpoint needs the safetensors package") from e
        return load_file(path, device="cpu")
    return torch.load(path, map_location="cpu", weights_only=True)

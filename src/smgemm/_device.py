"""What the planner needs to know about a device, read once per device and cached.

Nothing here runs at import time. A `DeviceSpec` is a frozen value, so a plan computed for `cuda:0` is never
reused for `cuda:1` by accident: the spec is part of every plan key.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
from triton.runtime.interpreter import InterpretedFunction

from .kernels.gemm import gemm_kernel


@dataclass(frozen=True)
class Rates:
    """The measured rates and costs of the planner's model (`plan.py`), in iterations of the 128 x 256 reference
    tile (~0.85 us each on the H200). The defaults are the H200's, fitted with the sweeps in benchmarks/; another
    device plans with them scaled to its device-memory bandwidth (`rates_for`). They order tile and schedule choices;
    they set no limit that could make a plan incorrect. Pass another `Rates` in a `DeviceSpec`, or in
    `smgemm.overrides(rates=...)`, to plan for other numbers.
    """

    # Device-memory bytes the chip streams in one reference iteration (~4 TB/s x 0.85 us): no schedule beats
    # streaming its operands once.
    hbm_bytes_per_iter: float = 3.4e6
    # Operand bytes one SM loads in one reference iteration with a 16-row (decode) tile, ~30 GB/s: the program that
    # streams the most bytes bounds the GEMM. Larger tiles load faster (`sm_own_bytes_per_iter`).
    sm_bytes_per_iter: float = 25.6e3
    # Operand bytes one SM loads by itself in a reference iteration, ~68 GB/s: persistent 64 x 64, 128 x 64 and
    # 64 x 128 tiles on 32-128 SMs ran at 63-75 GB/s per SM. With every SM busy, the shared L2 bandwidth binds first.
    sm_own_bytes_per_iter: float = 68e9 * 0.85e-6
    # On the Hopper path a 128 x 128 tile runs at ~0.9 of the 128 x 256 tile's rate, not the 0.75 its arithmetic
    # intensity alone predicts (1024x6144x4096: 629 TFLOP/s in 2.9 waves against 700): efficiency ** 0.35.
    hopper_efficiency_exponent: float = 0.35
    # Stream-K fixup, fitted to 66 measured shapes and budgets (benchmarks/sweep_streamk.py): a fixed part (the flag
    # round trip, the workspace traffic's latency; with 3.0, 128 x 4096 x 8192 split where 64 x 64 persistent tiles
    # ran 9% faster) plus, per program sharing a split tile, a part for a 128 x 256 fp32 partial (scaled by its size).
    sk_fixup_base: float = 4.0
    sk_fixup_per_sharer: float = 6.0
    # `auto` takes Stream-K only when it is predicted this much faster: within a few percent either way is a tie,
    # and the persistent loop has no fixup risk.
    sk_margin: float = 0.97
    # A split iteration of a Hopper-path tile costs this many whole-tile ones where the split ranges drift across
    # tiles (the grid not aligned to the split tiles): bf16 3072^2 x 8192's 23 split iterations a program took ~21 us
    # against ~16 at the whole waves' rate. Fitted to 23 splits of the last wave timed against splits of the last two
    # (1.10-1.18 fit, 1.14 picks the faster plan in the most). Not charged to pointer-path tiles: there it moved 8
    # plans to persistent tiles, 1-15% slower.
    sk_drift: float = 1.14
    # Fewest programs, as a fraction of the budget, that an aligned Stream-K grid may use: the split that drifts
    # across tiles measured 11-20% slower on 16-64 tiles, so giving up 10% of the SMs still pays.
    sk_align_fill: float = 0.9
    # What an iteration of a few-tile Stream-K 64 x 128 pointer tile costs with the deeper pipeline (`plan.py`'s
    # `_DEEP_STAGES`) relative to 4 stages.
    deep_factor: float = 0.85
    # What an iteration of a 16-bit 128 x 128 Hopper-path tile costs with 5 stages (`plan.py`'s `_SQUARE_DEEP_STAGES`)
    # relative to the model's rate: on the H200 (benchmarks/sweep_configs.py, "128x128x64 w8 s5 tma whole" against
    # the planner's 128 x 256 tiles, one run) two waves of them took 0.51-0.52 of one wave of 128 x 256 tiles an
    # iteration (2048^3 28.5 against 27.8 us, 1024 x 4096 x 4096 51.1 against 49.0), where the model says 0.55.
    square_deep_factor: float = 0.94
    # What an iteration of a 64 x 128 pointer tile with 256-byte K steps (16-bit or fp8) costs relative to the model's
    # rate where one wave of them covers a long K loop (`plan.py`'s `_one_wave_64`): on the H200 such a bf16 program
    # ran a step in 0.57 of a reference iteration (256 x 4096 x 8192 in 30.8 us, benchmarks/sweep_configs.py), where
    # the model says 0.97.
    one_wave_64_factor: float = 0.6
    # A plan whose operand rows are not aligned as its tile reads them fastest (16 bytes for TMA, 16 elements for
    # pointer loads: an odd K, a sliced view) loads them element by element: 7-43x slower on the H200 with 64- to
    # 256-wide tiles, 2.4-7.5x with 16-row decode tiles, which stream a weight. The planner charges the lower ends.
    # Copying such an operand into an aligned buffer first (`plan.stage_pays`) costs `stage_fixed` a copy plus its
    # bytes, read and written, at `stage_bytes_per_iter` on the whole device or `stage_sm_bytes_per_iter` per SM
    # of a budget (2.4-2.8 TB/s, ~19 GB/s per SM). benchmarks/sweep_unaligned.py.
    unaligned_slowdown: float = 6.0
    unaligned_decode_slowdown: float = 2.4
    # Read in place with a 32-deep tile (`plan.INPLACE_CONFIGS`), operands of 1- or 2-byte elements come in one
    # element a load, which Triton cannot pipeline (cp.async moves 4 bytes or more): a program then loads about
    # this many elements of them an iteration (~5.5e9 a second; 32 x 64 x 32 to 128 x 128 x 32 tiles moved 6-11 GB/s
    # of bf16 an SM, the lower end on long-K problems of few tiles). benchmarks/sweep_unaligned.py --inplace.
    # The in-place tiles load odd rows a step ahead (`kernels.common.k_loop_dense`), which the rate counts: with it at
    # 6.1e3 (and `inplace_run_speedup` at 1.695, so that 4-byte runs keep their rate of 1.03e4), 21 plans over random
    # draws 0-11 move and ran 0.82x the time of those at 4.7e3 in bf16 and fp16 alike (0.50-1.03x; 84 x 15219 x 1233
    # 58.0 -> 40.1 us, read in place where it was copied; `benchmarks/sweep_tile_order.py --seeds 12 --rates
    # unaligned_loads_per_iter=6100,inplace_run_speedup=1.695` at 39e5063).
    unaligned_loads_per_iter: float = 6.1e3
    # K-runs of 4 bytes or more (an even K of 16-bit elements, rows 4 or 8 bytes apart) come in asynchronous copies,
    # which the in-place tiles' stages (`plan.INPLACE_CONFIGS`) keep in flight: a persistent program loads them this
    # many times faster. On the H200 (bf16, forced tiles read in place at their stages, `benchmarks/sweep_configs.py`)
    # the element-load model (at 4.7e3 elements an iteration) over-estimated their time 2.15-2.39x with 32 x 64
    # tiles, 2.65-3.30x with 64 x 64 and 2.82-4.2x with 64 x 128 and 128 x 64 (8425 x 104 x 1842, 117 x 4060 x 5322,
    # 662 x 254 x 8868, 126 x 1204 x 4674, 3000 x 2000 x 1002); the planner takes the lowest (2.2 at 4.7e3, the same
    # runs' rate as 1.695 at 6.1e3), so that it never prefers reading in place on a guess.
    # A Stream-K program's few steps gained too (273 x 64 x 2526 9.07 -> 8.38 us, 81 x 111 x 3334 10.1 -> 8.98).
    inplace_run_speedup: float = 1.695
    # What a persistent program reading such runs in place pays beyond them (its pipeline's fill and drain), which
    # the launch floor hid: a 32 x 64 tile a program took 3.2 + 0.23 us a step (12-25 steps: 767 x 100 x 378,
    # 142 x 123 x 354, 415 x 76 x 770, 70 x 285 x 758; bf16 planner rows, one run). With 1.5, the planner takes
    # the faster of that and a Stream-K grid for 6 of 8 such problems timed both ways; 142 x 123 x 354 (5.80 against
    # 5.50 us) and 601 x 144 x 518 (7.55 against 6.92) it mispicks.
    inplace_run_fixed: float = 1.5
    # Such 32-deep tiles may also split K over the whole device (Stream-K), where a few small problems spread their
    # element loads over more SMs. Their fixup's fixed part, fitted to six problems whose tiles run 12-85 K steps
    # (benchmarks/sweep_configs.py "32x64x32 w4 s2 sk nostage"): 415 x 76 x 770 ran 7.28 us (modelled 7.24),
    # 370 x 113 x 767 7.15 (7.24), 149 x 79 x 433 5.93 (6.21), 75 x 843 x 375 6.49 (6.05), 76 x 191 x 615 6.59
    # (7.17), 72 x 90 x 2718 12.2 (12.15; then with `sk_fixup_per_sharer`: it runs 9.3-9.4 at 8ff6ba3, modelled 11.4
    # with the part below). `sk_fixup_base` is 1 higher: see there.
    inplace_sk_fixup_base: float = 3.0
    # and their part per program sharing a split tile (as `sk_fixup_per_sharer`), for the model of the plan read in
    # place and of its aligned bound alike (`plan.inplace_time`). With `sk_fixup_per_sharer` there, tiles split ~22
    # ways were modelled at 14.2 us where they ran 8.9-9.4: 72 x 90 x 2718, 83 x 83 x 2687 and 71 x 73 x 2055 with
    # odd rows, copied first, took 11.2-12.9 us, in place 8.5-9.4 (planner rows of `benchmarks/sweep_configs.py`,
    # 3d1cc83 against this rate, two runs each in one call). Rates of 4-5.5 pick the faster of copying and reading
    # in place for each of 25 few-tile problems with odd rows timed both ways (`--variants "auto stage;auto
    # nostage"` at 79479cb: 24 random draws of M 64-400, N 64-600, K 1200-16384, and 72 x 90 x 2718); 6 mispicks 3
    # of them, 3 mispicks 2.
    inplace_sk_fixup_per_sharer: float = 4.0
    # The shortest a GEMM launch runs, however little work it has (3.6-6 us measured for GEMMs modelled at 1-3
    # iterations): what a staged plan adds to its copy at the least.
    launch_floor: float = 5.0
    stage_fixed: float = 4.0
    stage_bytes_per_iter: float = 2.1e6
    stage_sm_bytes_per_iter: float = 16e3


H200_RATES = Rates()
# The H200's peak device-memory bandwidth (HBM3e: 6144-bit bus, 3.2 GHz, two transfers a clock), which its rates'
# whole-device bandwidth terms were measured against.
_H200_PEAK_BYTES_PER_S = 4.8e12


def rates_for(props) -> Rates:
    """The planner's rates for a CUDA device with properties `props` (torch.cuda.get_device_properties): the
    H200's measured rates for an H200, and for another device the same rates with their whole-device bandwidth terms
    (`hbm_bytes_per_iter`, `stage_bytes_per_iter`) scaled by its peak device-memory bandwidth against the H200's, no
    higher (an H100 SXM: 0.70 of them). The per-SM rates and costs, set by the SM and its clock, stay: Hopper SMs
    share them, and on older GPUs they only order the pointer-path tiles. Where torch does not report the memory
    clock and bus width, the H200's."""
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if "H200" in getattr(props, "name", "") or not clock_khz or not bus_bits:
        return H200_RATES
    scale = min(1.0, 2 * clock_khz * 1e3 * bus_bits / 8 / _H200_PEAK_BYTES_PER_S)
    return dataclasses.replace(H200_RATES, hbm_bytes_per_iter=H200_RATES.hbm_bytes_per_iter * scale,
                               stage_bytes_per_iter=H200_RATES.stage_bytes_per_iter * scale)


@dataclass(frozen=True)
class DeviceSpec:
    """The properties of one device that tile selection and grid sizing depend on."""

    name: str
    num_sms: int
    smem_per_block: int  # bytes of shared memory one program may use (opt-in maximum)
    capability: tuple[int, int]
    interpreted: bool = False  # kernels run in the Triton interpreter on the CPU
    l2_bytes: int = 50 * 2**20  # L2 cache size (the Stream-K model asks whether operand panels stay in it)
    rates: Rates = H200_RATES  # the planner model's measured rates


# The Triton interpreter has no SMs; it emulates an H200 so that CPU-planned grids match GPU-planned ones.
INTERPRETER_SPEC = DeviceSpec(
    name="triton-interpreter (emulating H200)",
    num_sms=132,
    smem_per_block=232448,
    capability=(9, 0),
    interpreted=True,
)


@functools.cache
def interpreter_active() -> bool:
    """True when Triton compiles `@triton.jit` functions for its CPU interpreter.

    Triton reads TRITON_INTERPRET when a function is decorated, so we ask a decorated kernel rather than the
    environment (which may have changed since); the answer is fixed for the life of the process.
    """
    return isinstance(gemm_kernel, InterpretedFunction)


@functools.cache
def _cuda_spec(index: int) -> DeviceSpec:
    props = torch.cuda.get_device_properties(index)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 232448
    return DeviceSpec(
        name=props.name,
        num_sms=props.multi_processor_count,
        smem_per_block=int(smem),
        capability=(props.major, props.minor),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 50 * 2**20),
        rates=rates_for(props),
    )


def device_spec(device: torch.device) -> DeviceSpec:
    """The spec of `device`: a CUDA device's own properties, or the interpreter's emulated H200 for the CPU."""
    if device.type == "cuda":
        return _cuda_spec(device.index if device.index is not None else torch.cuda.current_device())
    return INTERPRETER_SPEC


def tf32_enabled() -> bool:
    """Whether fp32 GEMMs may use TF32, following torch's own setting (new API first, then the legacy flag)."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", "none")
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:  # torch refuses to read the legacy flag after the new API was used
        return False

"""Time chosen tile configurations against the planner's choice and torch on a few shapes (GPU): the measurements behind
the tile model in smgemm.plan. Each variant is "BMxBNxBK wW sS [tma|tmaload] [whole] [pers|sk|dp] [noalign]" (BK in
elements; tma = TMA loads + TMA store + flattened loop; whole = with tma, one TMA store a tile rather than two halves;
default schedule pers; noalign = Stream-K split evenly over the whole budget, not over a grid aligned to the tiles;
noclamp = the last row and column of tiles start where a tile would, never a tile before the edge
(`smgemm._launch.edge_tiles_clamped`); rate:NAME=VALUE = planned with the model's `smgemm.Rates` field NAME set to
VALUE, e.g. "auto rate:one_wave_64_factor=1" for the planner without that factor; hostdesc / devdesc = A and B read
through descriptors built on the host / by each program on the device wherever they are read through TMA
(`smgemm.plan.overrides(host_descriptors=True / False)`; without either `plan.host_descriptors_pay` decides); MXFP4
GEMMs also take "swap" (W @ A^T)
and "prefetch", see benchmarks/sweep_mxfp4.py). A shape of four numbers, BxMxNxK, is a batched product (smgemm.bmm
against torch.bmm on [B, M, K] @ [B, K, N]); a trailing "u" (MxNxKu) reads the operands from buffers one column wider,
as the random suite's odd problems do; a trailing "c" (after any "u") adds a C matrix of the output's shape, against
torch.addmm / torch.baddbmm. "stage" / "nostage" copy operands whose rows the tile cannot read at full speed into
aligned buffers first, or read them in place (`smgemm.plan.overrides(stage=...)`; without either the planner weighs the
copy). "noring": an MXFP4 product planned without `kernels.mx_ring` (`smgemm.plan.overrides(ring=False)`). A variant
"auto ..." is the planner's own plan with the words that follow (e.g. "auto nostage").

    PYTHONPATH=src python benchmarks/sweep_configs.py --shapes 128x8192x8192 \\
        --variants "128x128x64 w8 s4 sk;128x128x64 w8 s4 tma sk"
"""

import argparse
import contextlib
import dataclasses
import math

import torch

import smgemm._gemm
import smgemm._launch
import smgemm.plan
from smgemm._device import device_spec, tf32_enabled
from smgemm._gemm import gemm
from smgemm._launch import operands_alignment
from smgemm.plan import DTYPES, TileConfig, decide
from smgemm.tools.bench import _operands, _torch_mm, describe
from smgemm.tools.timing import copies_for, graph_rotating, table, time_rotating

SCHEDULES = {"pers": "persistent", "sk": "streamk", "dp": "data_parallel"}


def parse_variant(text: str) -> tuple[TileConfig, str]:
    words = text.split()
    bm, bn, bk = (int(v) for v in words[0].split("x"))
    opts = {w[0]: int(w[1:]) for w in words[1:] if w[0] in "ws" and w[1:].isdigit()}
    tma, store = "tma" in words or "tmaload" in words, "tma" in words
    schedule = next((SCHEDULES[w] for w in words if w in SCHEDULES), "persistent")
    cfg = TileConfig(bm, bn, bk, num_warps=opts.get("w", 4), num_stages=opts.get("s", 3), tma=tma, tma_store=store,
                     flatten=store, whole_store="whole" in words, mx_swap="swap" in words,
                     mx_prefetch="prefetch" in words)
    return cfg, schedule


@contextlib.contextmanager
def patched(module, **attrs):
    """Experiments: set `module`'s attributes (planner constants, the kernel, ...) while the block runs, then put
    them back. The planner's caches and smgemm's repeat-call and launcher caches are emptied on the way in and out, so
    that plans and launches made inside reflect the change and none outlive it."""
    def forget():
        smgemm.plan.make_plan.cache_clear()
        smgemm.plan.hopper_path.cache_clear()
        smgemm._gemm._SEEN_CALLS.clear()
        smgemm._launch.LAUNCHERS.clear()

    saved = {name: getattr(module, name) for name in attrs}
    for name, value in attrs.items():
        setattr(module, name, value)
    forget()
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
        forget()


def _descriptors(words: list[str]) -> bool | None:
    """`overrides`' host_descriptors for a variant's words: "hostdesc" True, "devdesc" False, else None."""
    return True if "hostdesc" in words else False if "devdesc" in words else None


def with_rates(words: list[str]):
    """Plans made inside use the device's rates with the variant's "rate:NAME=VALUE" words applied, and with "noalign"
    split Stream-K tiles evenly over the whole budget, never over a grid aligned to the tiles (plan._aligned_programs);
    without either, the rates as they are. One `overrides` block for all of them: an inner block's rates replace an
    outer one's whole."""
    changes = {k: float(v) for k, v in (w[len("rate:"):].split("=", 1) for w in words if w.startswith("rate:"))}
    if "noalign" in words:
        changes["sk_align_fill"] = float("inf")
    if not changes:
        return contextlib.nullcontext()
    return smgemm.overrides(rates=dataclasses.replace(device_spec(torch.device("cuda")).rates, **changes))


def unclamped():
    """Launches made inside start the last row and column of tiles where a tile would, past the previous tile's end
    (no `smgemm._launch.edge_tiles_clamped`): the variant word "noclamp"."""
    return patched(smgemm._launch, edge_tiles_clamped=lambda *args, **kwargs: (False, False))


def fixed_plan(plan):
    """smgemm.gemm runs `plan` whatever it is asked (a tile and schedule alone leave the rest to the model)."""
    return patched(smgemm._gemm, decide=lambda *args, **kwargs: plan)


def plan_for_programs_per_sm(times: int):
    """Experiment: make smgemm plan for a device with `times` its SMs (several programs per SM; Stream-K then relies
    on them being resident together). Returns the spec it now plans with."""
    spec = device_spec(torch.device("cuda"))
    spec = dataclasses.replace(spec, num_sms=spec.num_sms * times)
    smgemm._gemm.device_spec = lambda device: spec
    return spec


def planned_for(a: torch.Tensor, b: torch.Tensor, with_c: bool, spec, num_sms: int | None):
    """The plan `gemm` makes for a @ b (2-D or batched) with a C matrix or none: staging included."""
    *batch, m, k = a.shape
    return decide(m, b.shape[-1], k, a.dtype, spec, num_sms=num_sms, tf32=a.dtype == torch.float32 and tf32_enabled(),
                  batch=batch[0] if batch else 1, operands=operands_alignment(a, b), c_matrix=with_c)


def sweep_shape(shape: str, flop: int, planned: str, variants: str, run, peer_ms: float) -> list[dict]:
    """One row for the planner's plan (label `planned`) and one per variant: `run(kw)` calls the GEMM with the
    keyword arguments `kw` ({} for the planner, else config and schedule) and returns (rel err, ms per call)."""
    rows = []
    for name in [planned, *(v for v in variants.split(";") if v.strip())]:
        row = {"shape": shape, "variant": name.strip()}
        try:
            if name is planned or name.split()[0] == "auto":
                kw = {}
            else:
                cfg, sched = parse_variant(name)
                kw = {"config": cfg, "schedule": sched}
            words = name.split()
            staging = True if "stage" in words else False if "nostage" in words else None
            with with_rates(words), unclamped() if "noclamp" in words else contextlib.nullcontext(), \
                    smgemm.plan.overrides(stage=staging, host_descriptors=_descriptors(words),
                                          ring=False if "noring" in words else None):
                err, t = run(kw)
            row.update({"us": t * 1e3, "TFLOP/s": flop / t / 1e9, "vs torch": peer_ms / t if peer_ms else 0.0,
                        "err": f"{err:.1e}"})
        except Exception as e:  # a variant that does not compile or apply is a result too
            row.update({"us": 0.0, "TFLOP/s": 0.0, "vs torch": 0.0, "err": f"{type(e).__name__}: {str(e)[:60]}"})
        rows.append(row)
        print(row, flush=True)
    return rows


def report(rows: list[dict]) -> None:
    """All rows, then the fastest per shape."""
    best = {}
    for row in rows:
        if row["TFLOP/s"] > best.get(row["shape"], {"TFLOP/s": -1.0})["TFLOP/s"]:
            best[row["shape"]] = row
    print(table(rows))
    print("\nbest per shape:")
    print(table(list(best.values())))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--num-sms", type=int, default=None)
    p.add_argument("--shapes", required=True, help="comma list of MxNxK (or BxMxNxK: batched)")
    p.add_argument("--variants", required=True, help="semicolon list of variants (see above)")
    p.add_argument("--graph", action="store_true",
                   help="time CUDA-graph replays (as serving engines' decode steps run), not back-to-back eager calls")
    p.add_argument("--programs-per-sm", type=int, default=1,
                   help="experiment: plan persistent / Stream-K grids for a device with this many times its SMs")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    if args.programs_per_sm > 1:
        spec = plan_for_programs_per_sm(args.programs_per_sm)
        print(f"experiment: planning for {spec.num_sms} SMs ({args.programs_per_sm} programs per SM)")
    # milliseconds a call, as sweep_shape takes them
    timer = (lambda fn, sets: graph_rotating(fn, sets) / 1e3) if args.graph else time_rotating
    rows = []
    for shape in args.shapes.split(","):
        with_c = shape.endswith("c")
        unaligned = shape.rstrip("c").endswith("u")
        *batch, m, n, k = (int(v) for v in shape.rstrip("c").rstrip("u").split("x"))
        batch = batch[0] if batch else 1
        if len(shape.split("x")) == 4:
            copies = max(1, min(8, math.ceil(256e6 / (batch * (m * k + k * n) * 2))))
            sets = [tuple(torch.randn(batch, *dims, device="cuda").to(dtype) for dims in ((m, k), (k, n)))
                    for _ in range(copies)]
        else:
            sets = _operands(m, n, k, dtype, copies_for(m, n, k, dtype), unaligned)  # rotated: no side reads L2
        if with_c:
            sets = [(*pair, torch.randn(*pair[0].shape[:-1], n, device="cuda").to(dtype)) for pair in sets]
        a, b, *c = sets[0]
        ref = a.float() @ b.float() + (c[0].float() if c else 0)
        peer = (torch.baddbmm if batch > 1 else torch.addmm) if with_c else _torch_mm(dtype)
        fp8_peer = dtype != DTYPES["fp8"] or (batch == 1 and not with_c)  # torch._scaled_mm: 2-D, no C
        t_torch = timer(lambda x, y, *z, peer=peer: peer(*z, x, y), sets) if fp8_peer else 0

        def run(kw, a=a, b=b, c=c, ref=ref, sets=sets):
            fn = lambda x, y, *z: gemm(x, y, c=z[0] if z else None, num_sms=args.num_sms, **kw)
            return ((fn(a, b, *c).float() - ref).norm() / ref.norm()).item(), timer(fn, sets)

        planned = f"{describe(planned_for(a, b, with_c, spec, args.num_sms))} (planner)"
        rows += sweep_shape(shape, 2 * batch * m * n * k, planned, args.variants, run, t_torch)
    report(rows)

if __name__ == "__main__":
    main()

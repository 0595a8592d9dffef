"""`python -m smgemm`: the benchmark and tuning commands, one argparse parser with subcommands."""

from __future__ import annotations

import argparse

from . import bench, overlap, tp, tune
from .timing import smgemm_version


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m smgemm", description="smgemm's benchmark and tuning commands.")
    p.add_argument("--version", action="version", version=f"smgemm {smgemm_version()}")
    commands = p.add_subparsers(dest="command", required=True, metavar="{bench,tune}")
    b = commands.add_parser("bench", help="smgemm vs torch, side by side (subcommands: overlap, tp)",
                            description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(b)
    b.set_defaults(run=bench.run)
    kinds = b.add_subparsers(dest="bench_command", metavar="{overlap,tp}")
    for name, module, summary in (("overlap", overlap, "a GEMM on k SMs beside a memory-bound kernel"),
                                  ("tp", tp, "a tensor-parallel MLP with overlapped all-reduce")):
        sub = kinds.add_parser(name, help=summary, description=module.__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    t = commands.add_parser("tune", help="time candidate configurations and write a tuning file",
                            description=tune.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_arguments(t)
    t.set_defaults(run=tune.run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)

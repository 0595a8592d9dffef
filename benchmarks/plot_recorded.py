"""Redraw docs/sm_scaling_bf16.png from an SM-budget table that `python -m smgemm bench` printed (no GPU needed).

    python benchmarks/plot_recorded.py bench_output.txt docs/sm_scaling_bf16.png

Reads the rows of the "SM budget" table (M, N, K, num_sms, smgemm TFLOP/s, cuBLASLt TFLOP/s, ...) from the
saved output and plots them with the bench's own `plot_budgets`.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from smgemm.tools.bench import plot_budgets


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench_output", help="a saved `python -m smgemm bench` output")
    p.add_argument("png", help="the plot to write")
    args = p.parse_args()
    src, dst = args.bench_output, args.png
    rows, in_table = [], False
    for line in open(src, encoding="utf-8"):
        if line.startswith("## "):
            in_table = "SM budget" in line
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if in_table and len(cells) >= 6 and cells[0].isdigit():
            m, n, k, sms = (int(c) for c in cells[:4])
            rows.append({"M": m, "N": n, "K": k, "num_sms": sms, "smgemm TFLOP/s": float(cells[4]),
                         "cuBLASLt carve-out TFLOP/s": float(cells[5])})
    print(plot_budgets(rows, dst))


if __name__ == "__main__":
    main()

"""Why does the partitioned GEMM + GEMV not reach its isolated prediction? Clocks and power per mode (GPU).

Each mode runs back to back for 1.5 s while nvidia-smi samples the SM clock, board power and the active clock
throttle reasons every 50 ms: the GEMM alone (full chip, and on k SMs), the GEMV alone (full chip, and on the
other SMs), sequential (full chip each), and partitioned (`SMPartition.split(k)`, both at once).

    PYTHONPATH=src python scripts/overlap_power.py --num-sms 80
"""

import argparse
import statistics
import subprocess
import time

import torch

import smgemm
from smgemm.bench import _table
from smgemm.overlap_bench import _side_by_side, kv_scores

QUERY = "timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-sms", type=int, default=80)
    p.add_argument("--seconds", type=float, default=1.5)
    args = p.parse_args()
    a = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    w = torch.randn(8192, 8192, device="cuda").to(torch.bfloat16)
    d = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(366_000, 8192, device="cuda").to(torch.bfloat16)  # 6 GB
    q = torch.randn(8192, device="cuda")
    r = torch.empty(kv.shape[0], device="cuda")
    g_part, m_part = smgemm.SMPartition.split(args.num_sms)
    k = args.num_sms

    def gemm(sms=None):
        return lambda: smgemm.matmul(a, w.t(), num_sms=sms, out=d)

    def gemv():
        kv_scores(kv, q, r)

    def in_part(part, fn):
        def run():
            with torch.cuda.stream(part.stream):
                fn()
            torch.cuda.current_stream().wait_stream(part.stream)
        return run

    modes = {
        "GEMM full chip": gemm(),
        f"GEMM on {k} SMs (own partition)": in_part(g_part, gemm(k)),
        "GEMV full chip": gemv,
        f"GEMV on {m_part.num_sms} SMs (own partition)": in_part(m_part, gemv),
        "sequential": lambda: (gemm()(), gemv()),
        "partitioned": lambda: _side_by_side((g_part.stream, gemm(k)), (m_part.stream, gemv)),
    }
    for fn in modes.values():  # compile
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    spans = {}
    for name, fn in modes.items():
        time.sleep(0.3)
        t0 = time.time()
        calls = 0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        while time.time() - t0 < args.seconds:
            fn()
            calls += 1
            if calls % 4 == 0:
                torch.cuda.synchronize()
        end.record()
        end.synchronize()
        spans[name] = (t0 + 0.3, time.time(), start.elapsed_time(end) / calls)
    time.sleep(0.3)
    smi.terminate()
    samples, lines = [], smi.stdout.read().splitlines()
    for line in lines:
        try:
            stamp, clock, power, reasons = (v.strip() for v in line.split(","))
            day, frac = stamp.split(".")
            t = time.mktime(time.strptime(day, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
            samples.append((t, float(clock), float(power), reasons))
        except ValueError:
            continue
    if not samples:
        print("no nvidia-smi samples; its output began:", lines[:3])
    rows = []
    for name, (t0, t1, ms) in spans.items():
        inside = [s for s in samples if t0 <= s[0] <= t1]
        rows.append({"mode": name, "ms per call": ms, "samples": len(inside),
                     "SM MHz": statistics.mean(s[1] for s in inside) if inside else 0.0,
                     "power W": statistics.mean(s[2] for s in inside) if inside else 0.0,
                     "throttle reasons": " ".join(sorted({s[3] for s in inside}))})
    print(_table(rows))


if __name__ == "__main__":
    main()

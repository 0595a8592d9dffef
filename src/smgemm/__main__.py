"""`python -m smgemm bench [...]` (smgemm.bench) and `python -m smgemm tune [...]` (smgemm.tuning)."""

import os
import sys

import torch


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] not in ("bench", "tune"):
        print("usage: python -m smgemm {bench,tune} [--help]", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton reads TRITON_INTERPRET when kernels are defined, so restart with it set.
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "smgemm", *args])
    if args[0] == "tune":
        from smgemm.tuning import main as tune_main

        return tune_main(args[1:])
    from smgemm.bench import main as bench_main

    return bench_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())

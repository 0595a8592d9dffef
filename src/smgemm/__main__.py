"""`python -m smgemm ...`: the commands of `smgemm.tools.cli` (`--help` lists them)."""

import os
import sys

import torch


def main() -> int:
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        # Triton reads TRITON_INTERPRET when kernels are defined, so restart with it set (before smgemm is imported).
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, "-m", "smgemm", *sys.argv[1:]])
    from smgemm.tools.cli import main as cli_main  # after the environment is settled

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

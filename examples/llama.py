"""Run a HuggingFace Llama on smgemm: swap its Linear layers, check the logits, time it against the original.

    python examples/llama.py                      # GPU: Llama-3-8B-shaped layers (4 of them), decode and prefill
    python examples/llama.py --size tiny          # anywhere; without a GPU through the Triton interpreter
    python examples/llama.py --num-sms 100        # the swapped model's GEMMs on at most 100 SMs
    python examples/llama.py --mxfp4              # MXFP4 weights (the bf16 model then holds their exact values)

Random weights from a config (nothing is downloaded). The swap is one line in your own code:

    smgemm.nn.swap_linears(model, num_sms=None, mxfp4=False)   # every nn.Linear -> smgemm.nn.Linear / MXFP4Linear

(`smgemm.tools.model.llama_models` builds both models; `python -m smgemm bench --mxfp4` prints the same table.)
"""

import argparse
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (by smgemm)

from smgemm.tools.model import LLAMA_SIZES, model_rows
from smgemm.tools.timing import table


def main() -> None:
    gpu = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=LLAMA_SIZES, default="mid" if gpu else "tiny")
    p.add_argument("--num-sms", type=int, default=None)
    p.add_argument("--prefill", type=int, default=2048, help="prefill length (GPU; 16 tokens on the CPU)")
    p.add_argument("--batches", default="1,16,64", help="decode batch sizes (GPU; batch 1 on the CPU)")
    p.add_argument("--mxfp4", action="store_true", help="swap to MXFP4Linear layers (quantized weights)")
    p.add_argument("--layout", default=None, help="the MXFP4 weights' byte layout (smgemm.mxfp4.LAYOUTS; default: "
                   "MXFP4Linear's choice; 'hopper' and 'kwords' need every in_features a multiple of 128, so not "
                   "--size tiny)")
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")] if gpu else [1]
    print(f"{'cuda' if gpu else 'cpu'}: Llama {args.size}, num_sms={args.num_sms}, mxfp4={args.mxfp4}, "
          f"layout={args.layout}")
    print(table(model_rows(args.size, batches, args.prefill if gpu else 16, mxfp4=args.mxfp4,
                           num_sms=args.num_sms, layout=args.layout)))


if __name__ == "__main__":
    main()

"""Run a HuggingFace Llama on smgemm: swap its Linear layers, check the logits, time it against the original.

    python examples/llama.py                      # GPU: Llama-3-8B-shaped layers (4 of them), decode and prefill
    python examples/llama.py --size tiny          # anywhere; without a GPU through the Triton interpreter
    python examples/llama.py --num-sms 100        # the swapped model's GEMMs on at most 100 SMs
    python examples/llama.py --mxfp4              # MXFP4 weights (the bf16 model then holds their exact values)

Random weights from a config (nothing is downloaded). Copy the three lines marked "smgemm" into your own code.
"""

import argparse
import copy
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (by smgemm)

import transformers

import smgemm  # smgemm

SIZES = {
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "mid": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
                num_attention_heads=32, num_key_value_heads=8),
}


def _time_ms(fn) -> float:
    """Median ms of fn(); with CUDA graphs when the model can be captured (removes Python overhead)."""
    from triton.testing import do_bench

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return do_bench(graph.replay, warmup=25, rep=200, return_mode="median")
    except Exception as exc:
        print(f"  (CUDA graph capture failed: {type(exc).__name__}; timing eager calls)")
        return do_bench(fn, warmup=10, rep=100, return_mode="median")


@torch.no_grad()
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=SIZES, default="mid" if torch.cuda.is_available() else "tiny")
    p.add_argument("--num-sms", type=int, default=None)
    p.add_argument("--prefill", type=int, default=2048, help="prefill length (GPU)")
    p.add_argument("--batches", default="1,16,64", help="decode batch sizes (GPU; one step each)")
    p.add_argument("--mxfp4", action="store_true", help="swap to MXFP4Linear layers (quantized weights)")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = transformers.LlamaConfig(max_position_embeddings=4096, **SIZES[args.size])
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()

    ours = copy.deepcopy(model)
    swapped = smgemm.nn.swap_linears(ours, num_sms=args.num_sms, mxfp4=args.mxfp4)  # smgemm: every nn.Linear
    print(f"{device}: Llama {args.size}, {len(swapped)} Linear layers swapped, num_sms={args.num_sms}, "
          f"mxfp4={args.mxfp4}")
    if args.mxfp4:  # the reference multiplies the same (dequantized) values in bf16
        for name in swapped:
            model.get_submodule(name).weight.copy_(ours.get_submodule(name).weight.dequantize(torch.bfloat16))

    batches = [int(b) for b in args.batches.split(",")] if device == "cuda" else [1]
    lengths = [(b, 1, f"decode, batch {b}") for b in batches]
    lengths.append((1, args.prefill if device == "cuda" else 16, "prefill"))
    rows = []
    for batch, seq, label in lengths:
        ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        ref, got = model(ids).logits.float(), ours(ids).logits.float()
        rel = ((got - ref).norm() / ref.norm()).item()
        row = {"tokens": f"{batch} x {seq} ({label})", "rel diff of logits": f"{rel:.2e}"}
        if device == "cuda":
            t_torch = _time_ms(lambda ids=ids: model(ids))
            t_ours = _time_ms(lambda ids=ids: ours(ids))
            row.update({"torch ms": f"{t_torch:.3f}", "smgemm ms": f"{t_ours:.3f}",
                        "speed-up": f"{t_torch / t_ours:.2f}x"})
        if not rows:
            print("| " + " | ".join(row) + " |\n|" + "---|" * len(row))
        rows.append(row)
        print("| " + " | ".join(str(v) for v in row.values()) + " |", flush=True)
    # Logits are bf16 sums over the whole model: run-to-run differences of ~1e-2 relative are the bf16 rounding of
    # different (both valid) accumulation orders; tests/test_llama.py checks accuracy against float64.


if __name__ == "__main__":
    main()

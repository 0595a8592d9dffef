"""A HuggingFace Llama on smgemm against the same model in torch: the model-level table of `python -m smgemm bench
--mxfp4` and of examples/llama.py.

The model is random, built from a config (nothing is downloaded): "mid" is Llama-3-8B-shaped with 4 decoder layers,
"tiny" runs anywhere (through the Triton interpreter without a GPU). Every nn.Linear of a copy is swapped by
`smgemm.nn.swap_linears` (to `MXFP4Linear` with `mxfp4`, and then the torch model holds the same, dequantized,
values), and both run the same token ids: the logits' relative difference, and on a GPU each forward's time as a
CUDA-graph replay. Needs `transformers` (smgemm's `test` extra).
"""

from __future__ import annotations

import copy

import torch

import smgemm

from .timing import capture

LLAMA_SIZES = {
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "mid": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
                num_attention_heads=32, num_key_value_heads=8),
}


@torch.no_grad()
def llama_models(size: str, *, mxfp4: bool = False, num_sms: int | None = None, device: str = "cuda",
                 layout: str | None = None) -> tuple[torch.nn.Module, torch.nn.Module, list[str]]:
    """(torch model, smgemm model, the swapped layers' names) of a random bf16 Llama of `size` (`LLAMA_SIZES`);
    `layout`: the MXFP4 weights' byte layout (`swap_linears`)."""
    import transformers  # the test extra; only this tool needs it

    torch.manual_seed(0)
    config = transformers.LlamaConfig(max_position_embeddings=4096, **LLAMA_SIZES[size])
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    ours = copy.deepcopy(model)
    swapped = smgemm.nn.swap_linears(ours, num_sms=num_sms, mxfp4=mxfp4, layout=layout)
    if mxfp4:  # the reference multiplies the same (dequantized) values in bf16
        for name in swapped:
            model.get_submodule(name).weight.copy_(ours.get_submodule(name).weight.dequantize(torch.bfloat16))
    return model, ours, swapped


def forward_ms(fn) -> float:
    """Median milliseconds of `fn()`, replayed from a CUDA graph (no host time); eager calls where the model cannot
    be captured."""
    from triton.testing import do_bench

    try:
        return do_bench(capture(fn).replay, warmup=25, rep=200, return_mode="median")
    except Exception as exc:  # whatever the capture met: the eager time is still a measurement
        print(f"  (CUDA graph capture failed: {type(exc).__name__}; timing eager calls)")
        return do_bench(fn, warmup=10, rep=100, return_mode="median")


@torch.no_grad()
def model_rows(size: str, batches: list[int], prefill: int, *, mxfp4: bool = False,
               num_sms: int | None = None, layout: str | None = None) -> list[dict[str, object]]:
    """One row per decode batch (one token each) and one for a prefill of `prefill` tokens: the logits' relative
    difference and, on a GPU, torch's and smgemm's forward times and the speed-up."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, ours, _ = llama_models(size, mxfp4=mxfp4, num_sms=num_sms, device=device, layout=layout)
    vocab = model.config.vocab_size
    rows = []
    for batch, seq, label in [*((b, 1, f"decode, batch {b}") for b in batches), (1, prefill, "prefill")]:
        ids = torch.randint(0, vocab, (batch, seq), device=device)
        ref, got = model(ids).logits.float(), ours(ids).logits.float()
        row = {"tokens": f"{batch} x {seq} ({label})", "rel diff of logits": ((got - ref).norm() / ref.norm()).item()}
        if device == "cuda":
            t_torch, t_ours = forward_ms(lambda ids=ids: model(ids)), forward_ms(lambda ids=ids: ours(ids))
            row.update({"torch ms": t_torch, "smgemm ms": t_ours, "speed-up": t_torch / t_ours})
        rows.append(row)
    # Logits are bf16 sums over the whole model: differences of ~1e-2 relative are the bf16 rounding of different
    # (both valid) accumulation orders; tests/test_llama.py checks accuracy against float64.
    return rows

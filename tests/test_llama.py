"""A real model: a HuggingFace Llama (small random config, nothing downloaded) with its Linear layers swapped."""

import copy

import pytest
import torch

import smgemm

transformers = pytest.importorskip("transformers")


def tiny_llama(device, dtype=torch.bfloat16, **overrides):
    config = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    config.update(overrides)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def test_swapped_llama_logits_match(device):
    model = tiny_llama(device)
    reference = copy.deepcopy(model).double()  # the same weights, evaluated in float64
    swapped = copy.deepcopy(model)
    names = smgemm.nn.swap_linears(swapped)
    assert len(names) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer, and lm_head
    ids = torch.randint(0, 128, (2, 12), device=device)
    exact = reference(ids).logits
    torch_err = (model(ids).logits.double() - exact).abs().max().item()
    ours = swapped(ids).logits
    ours_err = (ours.double() - exact).abs().max().item()
    # Both run every Linear in bf16 with fp32 accumulation and round its output to bf16; they differ only in the
    # order of the accumulation. So smgemm may not be less accurate than torch's own bf16 model (2x for the
    # luck of the rounding), measured against the same weights in float64.
    assert ours_err <= 2 * torch_err + 1e-3, (ours_err, torch_err)
    assert not ours.isnan().any()


def test_swapped_llama_trains_and_compiles(device):
    model = tiny_llama(device, dtype=torch.float32, num_hidden_layers=1)
    swapped = copy.deepcopy(model)
    smgemm.nn.swap_linears(swapped, num_sms=4)
    ids = torch.randint(0, 128, (2, 8), device=device)
    for m in (model, swapped):
        m(ids, labels=ids).loss.backward()
    for (name, p), q in zip(model.named_parameters(), swapped.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    torch._dynamo.reset()
    compiled = torch.compile(swapped, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids).logits, swapped(ids).logits, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_mxfp4_llama_matches_dequantized_reference(device):
    model = tiny_llama(device)
    quantized = copy.deepcopy(model)
    smgemm.nn.swap_linears(quantized, mxfp4=True)
    # The reference: the same model with every Linear weight replaced by its dequantized MXFP4 values.
    reference = copy.deepcopy(model)
    for name, module in quantized.named_modules():
        if isinstance(module, smgemm.nn.MXFP4Linear):
            reference.get_submodule(name).weight.copy_(module.weight.dequantize(torch.bfloat16))
    exact = copy.deepcopy(reference).double()
    ids = torch.randint(0, 128, (2, 12), device=device)
    torch_err = (reference(ids).logits.double() - exact(ids).logits).abs().max().item()
    ours = quantized(ids).logits
    ours_err = (ours.double() - exact(ids).logits).abs().max().item()
    assert ours_err <= 2 * torch_err + 1e-3, (ours_err, torch_err)  # as in test_swapped_llama_logits_match

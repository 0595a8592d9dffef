"""MXFP4 models saved and loaded: exact round trips, reloading without quantizing, loud mismatches, torch's own
MXFP4 dtypes, and the checks swap_linears makes before changing anything."""

import copy
import json

import pytest
import torch

import smgemm
from smgemm.nn import MXFP4Linear
from test_llama import tiny_llama as _tiny_llama  # skips this module too where transformers is missing
from test_llama import transformers


def tiny_llama(device, dtype=torch.bfloat16, **overrides):
    return _tiny_llama(device, dtype, **{"num_hidden_layers": 1, **overrides})


def test_mxfp4_linear_state_dict_round_trips_exactly(tmp_path, device):
    layer = MXFP4Linear.from_linear(torch.nn.Linear(64, 16).to(device).bfloat16())
    path = tmp_path / "layer.pt"
    torch.save(layer.state_dict(), path)
    fresh = MXFP4Linear.empty(64, 16, device=device)
    fresh.load_state_dict(torch.load(path, weights_only=True))
    for name, t in layer.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], t), name
    x = torch.randn(4, 64, device=device).bfloat16()
    with torch.no_grad():
        assert torch.equal(fresh(x), layer(x))


@pytest.mark.parametrize("in_features,layout", [(128, "hopper"), (96, "ocp")])
def test_mxfp4_linear_stores_the_fast_layout_and_saves_the_interchange_one(in_features, layout, device):
    dense = torch.nn.Linear(in_features, 24).to(device).bfloat16()
    layer = MXFP4Linear.from_linear(dense)
    assert layer.layout == layout and layer.weight.layout == layout
    ocp = smgemm.quantize_mxfp4(dense.weight.detach())
    assert torch.equal(layer.state_dict()["weight_data"], ocp.data)  # checkpoints hold the ocp bytes
    assert torch.equal(layer.weight_data, ocp.to_layout(layout).data)
    other = MXFP4Linear.empty(in_features, 24, device=device, layout="ocp")
    other.load_state_dict(layer.state_dict())  # either layout loads the same checkpoint
    x = torch.randn(3, in_features, device=device).bfloat16()
    with torch.no_grad():
        assert torch.equal(other(x), layer(x))
    fresh = MXFP4Linear.empty(in_features, 24, device=device)
    fresh.load_state_dict(other.state_dict())
    assert fresh.layout == layout and torch.equal(fresh.weight_data, layer.weight_data)


@pytest.mark.parametrize("fmt", ["torch", "safetensors"])
def test_a_swapped_model_reloads_without_quantizing(fmt, tmp_path, device, monkeypatch):
    model = tiny_llama(device)
    smgemm.nn.swap_linears(model, mxfp4=True)
    state = model.state_dict()
    if fmt == "torch":
        torch.save(state, tmp_path / "m.pt")
        loaded = torch.load(tmp_path / "m.pt", weights_only=True)
    else:
        safetensors = pytest.importorskip("safetensors.torch")
        safetensors.save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "m.safetensors"))
        loaded = safetensors.load_file(str(tmp_path / "m.safetensors"), device=str(device))
    fresh = tiny_llama(device)
    torch.manual_seed(1)
    for p in fresh.parameters():  # other weights: the checkpoint must replace all of them
        p.data.normal_()
    monkeypatch.setattr(smgemm.nn, "quantize_mxfp4", None)  # loading must not quantize anything
    names = smgemm.nn.load_mxfp4(fresh, loaded)
    assert len(names) == 7 + 1  # q, k, v, o, gate, up, down and lm_head
    ids = torch.randint(0, 128, (2, 8), device=device)
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)


@pytest.mark.parametrize("where", ["torch file", "safetensors file", "save_pretrained", "save_pretrained, shards"])
def test_a_swapped_model_reloads_from_where_it_was_saved(where, tmp_path, device, monkeypatch):
    """load_mxfp4 given a path: a torch.save file, a .safetensors file, or a Hugging Face save_pretrained directory
    (one file, or shards named by an index), into a model built from the saved config."""
    model = tiny_llama(device)
    smgemm.nn.swap_linears(model, mxfp4=True)
    if where == "torch file":
        path = tmp_path / "m.pt"
        torch.save(model.state_dict(), path)
    elif where == "safetensors file":
        safetensors = pytest.importorskip("safetensors.torch")
        path = tmp_path / "m.safetensors"
        safetensors.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    else:
        path = tmp_path / "saved"
        model.save_pretrained(path, **({"max_shard_size": "20KB"} if "shards" in where else {}))
        index = (path / "model.safetensors.index.json").exists()
        assert index == ("shards" in where)
        if index:
            assert len(set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"].values())) > 1
    config = model.config if "pretrained" not in where else transformers.AutoConfig.from_pretrained(path)
    torch.manual_seed(1)
    fresh = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    monkeypatch.setattr(smgemm.nn, "quantize_mxfp4", None)  # loading must not quantize anything
    names = smgemm.nn.load_mxfp4(fresh, path)
    assert len(names) == 7 + 1
    ids = torch.randint(0, 128, (2, 8), device=device)
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, model(ids).logits)


def test_reading_a_directory_without_a_checkpoint_names_what_it_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no checkpoint in this directory .*model\.safetensors"):
        smgemm.nn.read_checkpoint(tmp_path)


def test_mismatched_checkpoints_fail_naming_the_layer(device):
    dense = tiny_llama(device)
    quantized = copy.deepcopy(dense)
    smgemm.nn.swap_linears(quantized, mxfp4=True)
    with pytest.raises(RuntimeError, match=r"model.layers.0.self_attn.q_proj: the checkpoint holds a dense weight"):
        quantized.load_state_dict(dense.state_dict())
    swapped = copy.deepcopy(dense)
    smgemm.nn.swap_linears(swapped)
    with pytest.raises(RuntimeError, match=r"q_proj: the checkpoint holds an MXFP4 weight"):
        swapped.load_state_dict(quantized.state_dict())
    with pytest.raises(RuntimeError, match=r"model.layers.0.self_attn.q_proj.weight_data"):  # torch's own strict load
        copy.deepcopy(dense).load_state_dict(quantized.state_dict())
    smaller = tiny_llama(device, intermediate_size=96)
    with pytest.raises(ValueError, match=r"gate_proj: the checkpoint's weight_data is \(128, 32\)"):
        smgemm.nn.load_mxfp4(smaller, quantized.state_dict())


def test_swap_checks_every_layer_before_changing_any(device):
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 48), torch.nn.Linear(48, 8))
    model = model.to(device).bfloat16()
    before = [type(m) for m in model]
    with pytest.raises(ValueError, match=r"^2: cannot become an MXFP4 layer: in_features 48 is not a multiple of 32"):
        smgemm.nn.swap_linears(model, mxfp4=True)
    assert [type(m) for m in model] == before  # nothing changed
    report = smgemm.nn.swap_linears(model, mxfp4=True, incompatible="skip")
    assert list(report) == ["0", "1"] and list(report.skipped) == ["2"]
    assert isinstance(model[0], MXFP4Linear) and type(model[2]) is torch.nn.Linear
    with pytest.raises(ValueError, match=r"is torch.float32: MXFP4 layers take bf16 / fp16"):
        smgemm.nn.swap_linears(torch.nn.Sequential(torch.nn.Linear(64, 32)), mxfp4=True)


def test_tied_weights_stay_tied(device):
    model = tiny_llama(device, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with pytest.raises(ValueError, match=r"lm_head: .* tied to another module's parameter"):
        smgemm.nn.swap_linears(model, mxfp4=True)
    report = smgemm.nn.swap_linears(model, mxfp4=True, incompatible="skip")
    assert "lm_head" in report.skipped and "lm_head" not in report
    assert model.lm_head.weight is model.model.embed_tokens.weight
    dense = tiny_llama(device, tie_word_embeddings=True)
    smgemm.nn.swap_linears(dense)  # an smgemm Linear shares the Parameter: still tied
    assert dense.lm_head.weight is dense.model.embed_tokens.weight


@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"), reason="torch without MXFP4 dtypes")
def test_torch_mxfp4_dtypes_interoperate_bit_exactly():
    w = smgemm.quantize_mxfp4(torch.randn(8, 64) * 100)
    data, scales = w.to_torch()
    assert data.dtype == torch.float4_e2m1fn_x2 and scales.dtype == torch.float8_e8m0fnu
    back = smgemm.MXFP4Tensor.from_torch(data, scales)
    assert torch.equal(back.data, w.data) and torch.equal(back.scales, w.scales)
    # every e8m0 code means the same power of two (or NaN) in torch's own conversion
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    as_torch = codes.view(torch.float8_e8m0fnu).float()
    ours = smgemm.MXFP4Tensor(torch.full((256, 16), 0x22, dtype=torch.uint8), codes.reshape(256, 1))
    one = ours.dequantize(torch.float32)[:, 0]  # code 2 = 1.0 times the scale
    assert torch.equal(torch.isnan(one), torch.isnan(as_torch))
    assert torch.equal(one[:255], as_torch[:255])
    with pytest.raises(TypeError, match="data must be"):
        smgemm.MXFP4Tensor.from_torch(w.data, scales)


def test_kwords_layout_through_swap_and_reload(tmp_path, device):
    """`swap_linears(..., layout="kwords")` stores "kwords" weights, checks every layer's in_features first (a
    multiple of 128), saves the interchange bytes, and `load_mxfp4(..., layout=...)` reloads them in any layout."""
    def build():
        return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 96),
                                   torch.nn.ReLU(), torch.nn.Linear(96, 16)).to(device).bfloat16()

    model = build()
    with pytest.raises(ValueError, match=r"^4: cannot become an MXFP4 layer: in_features 96 is not a multiple of 128 "
                                         r"\(layout 'kwords'\)"):
        smgemm.nn.swap_linears(model, mxfp4=True, layout="kwords")
    assert all(type(model[i]) is torch.nn.Linear for i in (0, 2, 4))  # nothing changed
    report = smgemm.nn.swap_linears(model, mxfp4=True, layout="kwords", incompatible="skip")
    assert list(report) == ["0", "2"] and "4" in report.skipped and model[0].layout == model[2].layout == "kwords"
    with pytest.raises(ValueError, match="without mxfp4=True"):
        smgemm.nn.swap_linears(build(), layout="kwords")
    torch.save(model.state_dict(), tmp_path / "m.pt")
    x = torch.randn(3, 128, device=device).bfloat16()
    for layout in ("kwords", "hopper", "ocp", None):
        fresh = build()
        fresh[4] = model[4]  # the layer left dense
        names = smgemm.nn.load_mxfp4(fresh, torch.load(tmp_path / "m.pt", weights_only=True), layout=layout)
        assert names == ["0", "2"] and fresh[0].layout == (layout or "hopper")
        with torch.no_grad():
            got, want = fresh(x).float(), model(x).float()
        if layout == "kwords":
            assert torch.equal(got, want)
        else:  # other tiles sum in another order: the bf16 outputs of the two MXFP4 layers may each round one ulp
            # (2^-8 relative) apart, which the last layer carries on
            torch.testing.assert_close(got, want, rtol=2 ** -7, atol=2 ** -7 * want.abs().max().item())
    with pytest.raises(ValueError, match=r"^4: in_features 96 is not a multiple of 128 \(layout 'kwords'\)"):
        dense = build()
        smgemm.nn.swap_linears(dense, mxfp4=True)  # the default layouts: "hopper", and "ocp" for in_features 96
        smgemm.nn.load_mxfp4(build(), dense.state_dict(), layout="kwords")
    with pytest.raises(ValueError, match="layout must be None or one of"):
        smgemm.nn.load_mxfp4(build(), {}, layout="blackwell")

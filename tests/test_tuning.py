"""Explicit tuning: the search, the file, and the planner reading it (the search runs in the interpreter on CPU)."""

import json

import pytest
import torch

import smgemm
import smgemm._gemm
from reference import assert_gemm_close, randn
from smgemm import tuning
from smgemm._device import device_spec
from smgemm.plan import TileConfig, make_plan
from smgemm.tools import tune as tuner


@pytest.fixture(autouse=True)
def _no_table():
    yield
    smgemm.use_tuning(None)


def _plans(monkeypatch) -> list:
    """Record the plan of every launch."""
    seen = []
    launch = smgemm._gemm.launch
    monkeypatch.setattr(smgemm._gemm, "launch", lambda plan, *rest: (seen.append(plan), launch(plan, *rest)))
    return seen


def test_candidates_fit_and_cover_both_paths():
    spec = device_spec(torch.device("cpu"))
    found = tuner.candidates(256, 256, 512, torch.bfloat16, spec, 4)
    assert {s for _, s in found} == {"persistent", "streamk"}
    assert any(c.tma for c, _ in found) and any(not c.tma for c, _ in found)
    assert not any(c.tma for c, _ in found if c.block_m * c.block_n < 128 * 128)
    for cfg, _ in found:
        assert cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * 2 <= spec.smem_per_block - 16 * 1024
        assert cfg.block_m <= 256 and cfg.block_n <= 256


def test_tune_picks_the_fastest_and_the_planner_uses_it(tmp_path, monkeypatch, device):
    # A fake timer that prefers one particular candidate: the search must store exactly that one.
    spec = device_spec(torch.device(device))
    wanted = TileConfig(16, 64, 64, num_warps=4, num_stages=2)

    def timer(fn, sets):
        fn(*sets[0])
        return 1.0 if fn.__defaults__[0] == wanted else 2.0

    entries = tuner.tune([(48, 64, 128)], torch.float16, num_sms=3, device=device, timer=timer, log=None)
    assert len(entries) == 1 and entries[0]["config"]["block_n"] == 64 and entries[0]["num_sms"] == 3
    path = tmp_path / "tuned.json"
    tuning.save(entries, str(path))
    smgemm.use_tuning(str(path))
    assert tuning.lookup(spec, 48, 64, 128, torch.float16, 3) == (wanted, entries[0]["schedule"])

    plans = _plans(monkeypatch)
    a = randn((48, 128), torch.float16, device)
    b = randn((64, 128), torch.float16, device).t()
    assert_gemm_close(smgemm.matmul(a, b, num_sms=3), a, b)
    assert plans[-1].config == wanted
    # Other problems, another budget, an explicit schedule: planned by the model as before.
    smgemm.matmul(a, b, num_sms=4)
    assert plans[-1].config == make_plan(48, 64, 128, torch.float16, spec, num_sms=4).config
    smgemm.matmul(a, b, num_sms=3, schedule="persistent")
    assert plans[-1].config == make_plan(48, 64, 128, torch.float16, spec, num_sms=3, schedule="persistent").config
    smgemm.use_tuning(None)
    smgemm.matmul(a, b, num_sms=3)
    assert plans[-1].config == make_plan(48, 64, 128, torch.float16, spec, num_sms=3).config


_ENTRY = {"device": "x", "m": 1, "n": 1, "k": 1, "dtype": "bf16", "num_sms": 1, "schedule": "persistent",
          "config": {"block_m": 16, "block_n": 32, "block_k": 16}}


def _cfg(**change):
    return {"config": {**_ENTRY["config"], **change}}


@pytest.mark.parametrize(("text", "match"), [
    ('{"format": 1, "entries": [', r"not valid JSON"),
    (json.dumps({"entries": []}), r"not an smgemm tuning file"),
    (json.dumps(None), r"not an smgemm tuning file"),
    (json.dumps({"format": 1, "entries": 5}), r"'entries' must be a list, got int"),
    (json.dumps({"format": 1, "entries": None}), r"'entries' must be a list, got NoneType"),
    (json.dumps({"format": 1}), r"'entries' must be a list"),
])
def test_malformed_files_are_refused(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"{path}: {match}"):
        smgemm.use_tuning(str(path))


@pytest.mark.parametrize(("change", "match"), [
    ({"dtype": "int8"}, r"dtype must be one of"),
    ({"schedule": "fast"}, r"schedule must be one of"),
    ({"m": None}, r"m must be an int >= 0, got None"),
    ({"m": 40.7}, r"m must be an int >= 0, got 40.7"),
    ({"m": True}, r"m must be an int >= 0, got True"),
    ({"num_sms": 0}, r"num_sms must be an int >= 1"),
    ({"device": 3}, r"device must be a string"),
    ({"config": None}, r"config must be an object"),
    (_cfg(block_m=24), r"power of two"),
    (_cfg(num_warps=3), r"num_warps must be 1, 2, 4, 8 or 16, got 3"),
    (_cfg(num_stages=2.5), r"config.num_stages must be an int >= 1, got 2.5"),
    (_cfg(tma=1), r"config.tma must be true or false"),
    (_cfg(mx_swap=True), r"MXFP4"),
    (_cfg(colour="red"), r"unknown fields \['colour'\]"),
    ({"dtype": "fp8"}, r"fp8 needs config.block_k >= 32, got 16"),
    (_cfg(block_m=256, block_n=256, block_k=128, num_stages=4), r"shared memory"),
    ({"schedule": None}, r"schedule must be one of"),
])
def test_malformed_entries_are_refused_at_load(tmp_path, change, match):
    path = tmp_path / "bad.json"
    good = dict(_ENTRY, m=2)
    path.write_text(json.dumps({"format": tuning.FORMAT_VERSION, "entries": [good, {**_ENTRY, **change}]}))
    with pytest.raises(ValueError, match=f"{path}: entry 1 is malformed: .*{match}"):
        smgemm.use_tuning(str(path))
    missing = {k: v for k, v in _ENTRY.items() if k != "k"}
    path.write_text(json.dumps({"format": tuning.FORMAT_VERSION, "entries": [missing]}))
    with pytest.raises(ValueError, match=f"{path}: entry 0 is malformed: missing k"):
        smgemm.use_tuning(str(path))
    assert tuning.lookup(device_spec(torch.device("cpu")), 1, 1, 1, torch.bfloat16, 1) is None


def test_overrides_force_config_schedule_and_rates(monkeypatch, device):
    plans = _plans(monkeypatch)
    a = randn((96, 64), torch.float16, device)
    b = randn((80, 64), torch.float16, device).t()
    spec = device_spec(torch.device(device))
    forced = TileConfig(32, 64, 32, num_warps=4, num_stages=2)
    smgemm.matmul(a, b, num_sms=4)
    planned = plans[-1]
    with smgemm.overrides(config=forced):
        assert_gemm_close(smgemm.matmul(a, b, num_sms=4), a, b)
        assert plans[-1].config == forced
        with smgemm.overrides(schedule="streamk"):  # nested: both hold
            assert_gemm_close(smgemm.matmul(a, b, num_sms=4), a, b)
            assert plans[-1].config == forced and plans[-1].schedule == "streamk"
        smgemm.matmul(a, b, num_sms=4)
        assert plans[-1].config == forced and plans[-1].schedule == "persistent"
    smgemm.matmul(a, b, num_sms=4)  # the same signature as inside: planned afresh, not remembered from the block
    assert plans[-1] == planned
    # Rates: a Stream-K margin no split can meet keeps every auto plan persistent
    x, y = randn((32, 4096), torch.float16, device), randn((4096, 64), torch.float16, device)
    assert make_plan(32, 64, 4096, torch.float16, spec, num_sms=8).schedule == "streamk"
    smgemm.matmul(x, y, num_sms=8)
    assert plans[-1].schedule == "streamk"
    with smgemm.overrides(rates=smgemm.Rates(sk_margin=1e-9)):
        assert_gemm_close(smgemm.matmul(x, y, num_sms=8), x, y)
        assert plans[-1].schedule == "persistent"


def test_overrides_beat_tuning_files(tmp_path, monkeypatch, device):
    spec = device_spec(torch.device(device))
    entry = {"device": spec.name, "m": 48, "n": 64, "k": 128, "dtype": "fp16", "num_sms": 3, "schedule": "persistent",
             "config": {"block_m": 16, "block_n": 64, "block_k": 64, "num_warps": 4, "num_stages": 2}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": tuning.FORMAT_VERSION, "entries": [entry]}))
    smgemm.use_tuning(str(path))
    plans = _plans(monkeypatch)
    a, b = randn((48, 128), torch.float16, device), randn((128, 64), torch.float16, device)
    smgemm.matmul(a, b, num_sms=3)
    assert plans[-1].config.block_k == 64
    forced = TileConfig(16, 32, 32, num_warps=4, num_stages=3)
    with smgemm.overrides(config=forced):
        smgemm.matmul(a, b, num_sms=3)
    assert plans[-1].config == forced


def test_overrides_check_their_arguments():
    with pytest.raises(ValueError, match="schedule must be one of"), smgemm.overrides(schedule="fast"):
        pass
    with pytest.raises(TypeError, match="config must be a TileConfig"), smgemm.overrides(config=(16, 16, 16)):
        pass

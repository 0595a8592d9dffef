"""The package's shape: one-way layers, no import cycle, the tools above the library, a CLI that validates."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import smgemm
from smgemm.tools import cli

SRC = pathlib.Path(smgemm.__file__).parent

# Each module's layer: a module may import only from lower layers (kernels at the bottom, the tools on top).
LAYERS = [
    ["kernels", "kernels.common"],
    ["kernels.gemm", "kernels.mx_expand", "kernels.mx_ring", "kernels.stage"],
    ["_device", "mxfp4"],
    ["plan"],
    ["tuning", "_checks"],
    ["_launch"],
    ["_ring"],
    ["_gemm"],
    ["_library"],
    ["ops"],
    ["nn", "partition", "parallel"],
    ["__init__"],
    ["tools", "tools.timing", "tools.attention_gluon"],
    ["tools.attention"],
    ["tools.model"],
    ["tools.bench", "tools.overlap", "tools.tp"],
    ["tools.tune"],
    ["tools.cli"],
    ["__main__"],
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module_name(path: pathlib.Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__") or "__init__"


def _imports(path: pathlib.Path) -> list[tuple[str, bool]]:
    """(smgemm module imported, whether at module level) for every import in `path`."""
    package = _module_name(path).split(".")[:-1] if path.name != "__init__.py" else _module_name(path).split(".")
    if _module_name(path) == "__init__":
        package = []
    found = []
    tree = ast.parse(path.read_text())
    # module level: the module's statements, and those of its top-level try blocks (an optional dependency)
    top = {id(n) for node in tree.body for n in ([node, *node.body, *(h for x in node.handlers for h in x.body)]
                                                  if isinstance(node, ast.Try) else [node])}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                module = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            elif (node.module or "").startswith("smgemm"):
                module = node.module.removeprefix("smgemm").lstrip(".")
            else:
                continue
            # `from .tools import bench` imports the module tools.bench; `from .plan import make_plan`, plan
            names = [f"{module}.{a.name}".lstrip(".") if f"{module}.{a.name}".lstrip(".") in RANK else module
                     for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("smgemm").lstrip(".") for a in node.names if a.name.startswith("smgemm")]
        else:
            continue
        found += [(name or "__init__", id(node) in top) for name in names]
    return found


def test_every_module_has_a_layer():
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    assert modules == set(RANK), f"unplaced: {modules - set(RANK)}; gone: {set(RANK) - modules}"


def test_imports_point_down_and_are_at_module_level():
    for path in SRC.rglob("*.py"):
        me = _module_name(path)
        for name, at_top in _imports(path):
            assert name in RANK, f"{me} imports unknown smgemm module {name}"
            if me == "__main__":  # sets TRITON_INTERPRET before the first import of smgemm
                continue
            assert RANK[name] < RANK[me] or (name == me), f"{me} (layer {RANK[me]}) imports {name} ({RANK[name]})"
            assert at_top, f"{me} imports {name} inside a function"


def test_importing_the_library_imports_no_tool():
    code = "import sys, smgemm; print([m for m in sys.modules if m.startswith('smgemm.tools')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("argv", "code"), [
    (["--help"], 0),
    (["--version"], 0),
    ([], 2),
    (["bench", "--dtype", "bf17"], 2),
    (["bench", "--suite", "nope"], 2),
    (["bench", "--num-sms", "0"], 2),
    (["bench", "--batched-num-sms", "64,x"], 2),
    (["bench", "--schedules", "fast"], 2),
    (["bench", "overlap", "--gemm", "8x8"], 2),
    (["tune", "--shapes", "12x3", "--out", "x.json"], 2),
    (["tune", "--shapes", "12x3x4", "--dtype", "bf16,int8", "--out", "x.json"], 2),
    (["tune", "--shapes", "12x3x4"], 2),
    (["frobnicate"], 2),
])
def test_cli_validates(argv, code, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == code
    if code:
        assert "error:" in capsys.readouterr().err


def test_cli_subcommands_parse():
    p = cli.parser()
    args = p.parse_args(["bench", "--dtype", "bf16,fp8", "--num-sms", "16,132"])
    assert args.dtype == ["bf16", "fp8"] and args.num_sms == [16, 132] and args.run.__module__.endswith("bench")
    assert args.batched_num_sms == [64]
    assert p.parse_args(["bench", "--batched", "--batched-num-sms", "32,100"]).batched_num_sms == [32, 100]
    args = p.parse_args(["bench", "overlap", "--gemm", "1024x2048x512"])
    assert args.gemm == (1024, 2048, 512) and args.run.__module__.endswith("overlap")
    args = p.parse_args(["bench", "tp", "--world", "2"])
    assert args.run.__module__.endswith("tp")
    args = p.parse_args(["tune", "--shapes", "16x4096x4096,128x8x8", "--dtype", "bf16,fp16", "--out", "t.json"])
    assert args.shapes == [(16, 4096, 4096), (128, 8, 8)] and args.dtype == ["bf16", "fp16"]


def test_tune_runs_every_dtype_given(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("smgemm.tools.tune.tune", lambda shapes, dtype, **kw: seen.append(dtype) or [])
    assert cli.main(["tune", "--shapes", "16x32x32", "--dtype", "bf16,fp16", "--out", str(tmp_path / "t.json")]) == 0
    assert [str(d) for d in seen] == ["torch.bfloat16", "torch.float16"]


def test_every_benchmark_script_runs_with_help():
    # the calibration sweeps stay runnable: each parses its options (and imports what it uses) without a GPU
    folder = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
    scripts = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(folder, "..", "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    children = [(s, subprocess.Popen([sys.executable, os.path.join(folder, s), "--help"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for s in scripts]
    for script, child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0 and "usage:" in out, f"{script}: {err[-2000:]}"
    assert len(children) >= 10

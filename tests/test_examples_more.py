"""mlp_moons.py and inspect_pipeline.py run at a small size, and every command of the tapeml-opt
walkthrough in examples/README.md succeeds as written."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str) -> None:
    argv = sys.argv
    sys.argv = [name, *args]
    try:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    finally:
        sys.argv = argv


def load(name: str) -> dict:
    """An example's globals, without running its main()."""
    return runpy.run_path(str(EXAMPLES / name))


# ----------------------------------------------------------------------------------------------
# mlp_moons.py


def surface_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line and set(line) <= set(".#ox")]


def test_mlp_moons_small_run_writes_png_and_text_surface(tmp_path, capsys):
    png = tmp_path / "moons.png"
    run_example("mlp_moons.py", "--steps", "20", "--out", str(png))
    out = capsys.readouterr().out

    losses = [float(v) for v in re.findall(r"^step +\d+ +loss ([0-9.]+)$", out, re.MULTILINE)]
    assert len(losses) >= 2 and losses[-1] < losses[0], out
    assert re.search(r"training accuracy after 20 steps: [0-9.]+%", out), out

    lines = surface_lines(out)
    assert len(lines) == 24 and all(len(line) == 60 for line in lines), lines
    text = "".join(lines)
    assert "o" in text and "x" in text, "the training points are drawn on the surface"

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(png).shape == (450, 600, 4)  # 6 x 4.5 in at 100 dpi
    assert f"saved to {png}" in out


def test_mlp_moons_learns_the_moons():
    moons = load("mlp_moons.py")
    x, y = moons["data"]()
    params, losses = moons["train"](x, y, steps=300)
    assert losses[-1] < 0.1 * losses[0]
    predict = moons["tapeml"].jit(moons["forward"])
    assert np.mean((predict(params, x) > 0) == (y > 0.5)) > 0.95
    text = "".join(moons["ascii_surface"](predict, params, x, y))
    assert 0.2 < text.count("#") / len(text) < 0.8, "both classes have a region"


def test_mlp_moons_rejects_no_steps():
    with pytest.raises(SystemExit) as exit_:
        run_example("mlp_moons.py", "--steps", "0")
    assert exit_.value.code == 2


# ----------------------------------------------------------------------------------------------
# inspect_pipeline.py

STAGE_CONTENTS = {  # stage: (texts it must contain, texts it must not)
    "traced": (["tape.matmul", "tape.tanh", "tape.sum", 'tapeml.name = "result"'], ["grad"]),
    "differentiated": (["tape.tanh", "tape.sub", "tape.permute",
                        "func.return %result.0, %result.1.0, %result.1.1"], ["tape.fused"]),
    "fused": (["tape.fused", "tape.yield", "tape.matmul"], []),
    "loops": (["scf.for", "memref.load", "memref.store", "memref.alloc"], ["tape."]),
    "outlined": (["memref.load", "memref.store"], ["tape."]),
    "arena": (["memref.view %arena", "xi8> to memref<8xf32>"], ["memref.alloc", "memref.dealloc"]),
    "llvm-dialect": (["llvm.func @tapeml.f(", "llvm.getelementptr"],
                     ["scf.", "memref.", "arith.", "tape.", "malloc", "free"]),
    "llvm-ir": (['define void @"tapeml.f"(', "getelementptr", "phi"], ["llvm.func"]),
    "optimized-llvm-ir": (["define void @tapeml.f(", "noalias"], []),
    "assembly": (["\ntapeml.f:\n"], ["define"]),
}


def test_inspect_pipeline_stages_contents():
    pipeline = load("inspect_pipeline.py")
    texts = pipeline["stages"]()
    assert list(texts) == list(STAGE_CONTENTS) == list(pipeline["STAGES"])
    for stage, (present, absent) in STAGE_CONTENTS.items():
        for text in present:
            assert text in texts[stage], f"{stage}: no {text!r}"
        for text in absent:
            assert text not in texts[stage], f"{stage}: unexpected {text!r}"


def test_inspect_pipeline_prints_every_stage_under_a_header(capsys):
    run_example("inspect_pipeline.py")
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.startswith("==== ")]
    assert [h.split()[1].rstrip(":") for h in headers] == list(STAGE_CONTENTS)
    assert "- 6 ops (tape 3, func 2, builtin 1)" in headers[0], headers[0]  # matmul, tanh, sum
    assert re.search(r"- \d+ ops \(llvm \d+, builtin 1\)", headers[6]), headers[6]
    assert all(re.search(r"- \d+ lines ", h) for h in headers[7:]), headers[7:]
    assert "ptx" not in out.lower()


def test_inspect_pipeline_one_stage(capsys):
    run_example("inspect_pipeline.py", "--stage", "llvm-ir")
    out = capsys.readouterr().out
    assert out.startswith("==== llvm-ir: ") and out.count("\n==== ") == 0
    assert 'define void @"tapeml.f"(' in out and "tape." not in out
    with pytest.raises(SystemExit) as exit_:
        run_example("inspect_pipeline.py", "--stage", "ptx")
    assert exit_.value.code == 2


# ----------------------------------------------------------------------------------------------
# the tapeml-opt walkthrough in examples/README.md


def walkthrough_commands() -> list[str]:
    """The `$ ` lines of the README's sh blocks, with their `\\` continuation lines joined."""
    text = (EXAMPLES / "README.md").read_text()
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        lines = iter(block.splitlines())
        for line in lines:
            if not line.startswith("$ "):
                continue
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + next(lines).strip()
            commands.append(command)
    return commands


COMMANDS = walkthrough_commands()


def test_walkthrough_covers_the_pipeline():
    text = "\n".join(COMMANDS)
    for piece in ["tapeml-opt examples/mlp.mlir\n", "tape-differentiate", "tape-fuse{report=true}",
                  "-p canonicalize", "-p tape-to-loops", "-p tape-to-llvm", "-t llvm",
                  "-t host-asm", "tapeml-run examples/mlp.mlir"]:
        assert piece in text + "\n", f"the walkthrough runs no {piece.strip()!r}"


@pytest.mark.parametrize("command", COMMANDS)
def test_walkthrough_command_succeeds(command):
    bin_dir = Path(sys.executable).parent  # the virtualenv running the tests: .venv/bin
    assert (bin_dir / "tapeml-opt").exists(), f"tapeml-opt is not installed in {bin_dir}"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"$ {command}\nexit {done.returncode}\n{done.stderr}"
    assert done.stdout.strip(), f"$ {command} printed nothing"


def test_the_spelled_out_pipeline_prints_what_tape_to_llvm_does():
    """examples/README.md: tape-to-llvm's passes spelled out, as it lists them, print the same
    module (it listed two of tape-to-loops' options where tape-to-llvm sets seven)."""
    start = "tapeml-opt examples/mlp.mlir -p 'tape-fuse,"
    spelled = next(c for c in COMMANDS if c.startswith(start))
    whole = "tapeml-opt examples/mlp.mlir -p tape-to-llvm"
    assert whole in COMMANDS
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    outputs = [subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=True).stdout
               for command in (spelled, whole)]
    assert outputs[0] == outputs[1]

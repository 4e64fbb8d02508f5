"""Inference beside onnxruntime: imported ONNX models through tapeml's CPU backend and through
onnxruntime (its CPU provider, all graph optimizations), the same inputs, one process per
(model, batch, threads, system) pinned to that many cores, each system twice, alternating (its
best median kept).

    .venv/bin/python bench/onnx_models.py [--only squeezenet,resnet50,magika] [--threads 1,2]

squeezenet and resnet50 are the onnx wheel's "light" architectures with random weights in
place of their constant fills (He-scaled, so activations keep their size; BatchNormalization's
variances positive), batch 1 and 8; magika is the file-type classifier the magika package
ships (int32 bytes in), batch 1 and 8. Each row: both medians, the ratio (onnxruntime's time
over tapeml's: > 1, tapeml faster) and tapeml's first call (import + compile + run) with an
empty disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODELS = {"squeezenet": (1, 8), "resnet50": (1, 8), "magika": (1, 8)}


def light_model(name: str, batch: int):
    """The light architecture `name` with random weights and the batch dim `batch`."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    model = onnx.load(str(path))
    g = model.graph
    known = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    rng = np.random.default_rng(0)
    kept = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in known:
            shape = tuple(int(d) for d in known[node.input[0]])
            if len(shape) == 1:
                value = rng.uniform(0.5, 1.5, shape)
            else:
                value = rng.standard_normal(shape) * np.sqrt(2.0 / max(np.prod(shape[1:]), 1))
            g.initializer.append(numpy_helper.from_array(value.astype(np.float32),
                                                         node.output[0]))
        else:
            kept.append(node)
    del g.node[:]
    g.node.extend(kept)
    for node in g.node:  # a Reshape to (1, features): any batch
        if node.op_type == "Reshape" and node.input[1] in known:
            target = known[node.input[1]]
            if target.size == 2 and target[0] == 1:
                for t in g.initializer:
                    if t.name == node.input[1]:
                        t.CopyFrom(numpy_helper.from_array(np.array([-1, target[1]]), t.name))
    initialized = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in initialized]
    inputs[0].type.tensor_type.shape.dim[0].dim_value = batch
    for out in g.output:
        out.type.tensor_type.shape.dim[0].dim_value = batch
    x = rng.standard_normal([d.dim_value for d in inputs[0].type.tensor_type.shape.dim])
    return model, inputs[0].name, x.astype(np.float32)


def magika_model(batch: int):
    import importlib.util

    import numpy as np
    import onnx

    spec = importlib.util.find_spec("magika")
    model = onnx.load(str(Path(spec.submodule_search_locations[0]) / "models" / "standard_v3_3"
                          / "model.onnx"))
    x = np.random.default_rng(0).integers(0, 257, (batch, 2048)).astype(np.int32)
    return model, "bytes", x


def worker(system: str, name: str, batch: int, threads: int, rounds: int) -> dict:
    """The median time of one call of `name` on `system` ("tapeml", which first checks its
    outputs against a one-thread onnxruntime session it then drops, or "onnxruntime") in this
    process, alone: onnxruntime's threads spin a while after each call, which in a shared
    process slowed whatever ran next on the two cores."""
    import numpy as np
    import onnxruntime as ort

    model, input_name, x = magika_model(batch) if name == "magika" else light_model(name, batch)

    def session(n: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = n
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"])

    first = None
    if system == "tapeml":
        import tapeml
        import tapeml.onnx

        start = time.perf_counter()
        step = tapeml.jit(tapeml.onnx.load(model, input_shapes={input_name: x.shape}))
        ours = step(x)
        first = time.perf_counter() - start
        reference = session(1).run(None, {input_name: x})
        ours = ours if isinstance(ours, tuple) else (ours,)
        for a, b in zip(ours, reference, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
        del reference

        def call():
            return step(x)
    else:
        runner = session(threads)

        def call():
            return runner.run(None, {input_name: x})
    call()
    block = max(1, int(0.2 / max(1e-4, _once(call))))
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(block):
            call()
        times.append((time.perf_counter() - started) / block)
    return {"seconds": statistics.median(times), "first_call": first}


def _once(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", nargs=4, metavar=("SYSTEM", "MODEL", "BATCH", "THREADS"))
    args = parser.parse_args(argv)
    if args.worker:
        system, name, batch, threads = args.worker
        print(json.dumps(worker(system, name, int(batch), int(threads), args.rounds)))
        return 0
    print(f"{'model':<12}{'batch':>6}{'threads':>8}{'tapeml':>12}{'onnxruntime':>13}"
          f"{'ratio':>8}{'first call':>12}   (ratio: onnxruntime's time / tapeml's)")
    for name in args.only.split(","):
        for batch in MODELS[name]:
            for threads in map(int, args.threads.split(",")):
                best: dict[str, float] = {}
                first = None
                failed = ""
                for _ in range(2):  # each system twice, alternating, in processes of its own
                    for system in ("tapeml", "onnxruntime"):
                        out = _run_worker(system, name, batch, threads, args.rounds)
                        if isinstance(out, str):
                            failed = out
                            continue
                        best[system] = min(best.get(system, 1e9), out["seconds"])
                        first = out["first_call"] if system == "tapeml" and first is None \
                            else first
                if failed or len(best) < 2:
                    print(f"{name:<12}{batch:>6}{threads:>8}  failed: {failed[-600:]}")
                    continue
                ours, theirs = best["tapeml"], best["onnxruntime"]
                print(f"{name:<12}{batch:>6}{threads:>8}{ours * 1e3:>10.2f}ms"
                      f"{theirs * 1e3:>11.2f}ms{theirs / ours:>8.2f}{first:>10.2f} s", flush=True)
    return 0


def _run_worker(system: str, name: str, batch: int, threads: int, rounds: int) -> dict | str:
    """A worker's result, pinned to `threads` cores and told so; its stderr if it failed."""
    n = str(threads)
    env = {**os.environ, "TAPEML_NUM_THREADS": n, "OMP_NUM_THREADS": n,
           "TAPEML_CACHE_DIR": tempfile.mkdtemp(prefix="tapeml-bench-onnx-")}
    cores = "0" if threads == 1 else f"0-{threads - 1}"
    out = subprocess.run(["taskset", "-c", cores, sys.executable, __file__, "--rounds",
                          str(rounds), "--worker", system, name, str(batch), n],
                         capture_output=True, text=True, env=env)
    return out.stderr if out.returncode else json.loads(out.stdout.splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())

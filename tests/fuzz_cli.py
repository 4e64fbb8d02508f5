"""A mutation fuzzer for `tapeml-opt`: no input may make it crash, hang or print a traceback.

Each case mutates one of the .mlir/.test files under lit/ (one chunk of a split file): it
deletes, duplicates or swaps tokens and lines, or replaces a number, a shape, an element type, an
op name or a value name with another (a shape or an element type in one place or everywhere), and
runs `tapeml-opt` on it, first with no pipeline and then, where that succeeds, with
`-p tape-differentiate{seed=true},tape-fuse` (a vector-Jacobian product: every function with a
float result differentiates, where the scalar-seeded form took only those returning a scalar
first, 2 of 47 in the test's 150 cases), `-p tape-to-llvm -t llvm` and `-p tape-to-gpu -t ptx`
(where it fails, the input is refused while being parsed or verified, before any pass, so the
other pipelines would refuse it the same way), and then `tapeml-run` on it, with an argument of each
type its function takes. The oracle, for every run: no Python traceback, no crash (a signal), no
hang (a timeout), exit status 0, or 1 with `error:` on stderr (located, `file:line:col: error:`,
where the input was refused while being parsed or verified).

The runs happen in worker processes, each calling the tool's `main` in-process for speed;
a worker that dies (a segfault or abort inside LLVM) or stops answering is a crash or a hang of
the case it was running, and is replaced. A case is a function of the seed and its index alone,
so any one can be replayed (`--replay INDEX`).

    python tests/fuzz_cli.py [--cases N] [--seed S] [--workers W] [--replay INDEX]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import Counter
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue

from xdsl.ir import Attribute

ROOT = Path(__file__).resolve().parent.parent
LIT = ROOT / "lit"
PIPELINES: tuple[tuple[str, ...], ...] = (
    (),
    ("-p", "tape-differentiate{seed=true},tape-fuse"),
    ("-p", "tape-to-llvm", "-t", "llvm"),
    ("-p", "tape-to-gpu", "-t", "ptx"),
)
INTERPRET = ("tapeml-run",)
"""The last stage: tapeml-run on the function, with an argument of each type it takes."""
TIMEOUT_S = 60.0
MEMORY_LIMIT = 8 << 30
"""Each worker's address space: a runaway allocation is a MemoryError (a traceback), not the
machine's memory."""

@dataclass(frozen=True)
class Reproducer:
    """A known traceback's smallest input: `tapeml-<tool> f.mlir <argv>` on `text`."""

    why: str
    text: str
    tool: str
    argv: tuple[str, ...] = ()

    def command(self) -> str:
        return " ".join([f"tapeml-{self.tool}", "f.mlir", *map(_quote, self.argv)])


KNOWN: dict[str, Reproducer] = {}
"""Tracebacks the fuzzer found in code its authors may not edit, by signature, each with a
minimal reproducer: they are reported as known, not failed on, until they are fixed (then
delete the entry: tests/test_cli_fuzz.py checks that each still happens)."""

# ----------------------------------------------------------------------------------------------
# Cases

_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%^@#!][\w$.-]+|[\w.$]+|->|\S')
_NUMBER = re.compile(r"(?<![\w%^#@.$-])-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?![\w.])")
_SHAPE = re.compile(r"\b(?:tensor|memref|vector)<((?:(?:\d+|\?)x)*)")
_ELEMENTS = "bf16|f16|f32|f64|i1|i8|i32|i64|index"
_ELEMENT = re.compile(rf"(?<![\w.$%#@^!])(?:{_ELEMENTS})\b|(?<=\dx)(?:{_ELEMENTS})\b")
_OP = re.compile(r"(?m)(?:^[ \t]*|= )([a-z_]+\.[a-z_][\w.]*)")
_VALUE = re.compile(r"%[\w$.-]+")
NUMBERS = ("0", "1", "-1", "2", "3", "5", "16", "1000", "0.0", "-0.0", "0.5", "1.5", "-2.5",
           "4.0e64", "1.0e400", "3.4028235e+38", "1.0e-45", "2147483648",
           "99999999999999999999")
CLEAN_SHARE = 0.8
"""The share of cases that mutate a chunk with no `error` in it (most such chunks are valid;
the others test diagnostics, and most of their mutants are refused early too)."""
DIMS = ("0", "1", "1", "2", "2", "3", "4", "5", "8", "16", "?")
ELEMENTS = ("f32", "f32", "f64", "f64", "f16", "bf16", "i1", "i32", "i64", "index")


@dataclass(frozen=True)
class Case:
    index: int
    source: str
    """The lit file it mutates, relative to lit/."""
    mutations: tuple[str, ...]
    text: str

    def argv(self, path: str, pipeline: Sequence[str]) -> list[str]:
        return [path, *pipeline]


def lit_inputs() -> list[tuple[str, list[str]]]:
    """Every .mlir and .test file under lit/, as its path and its chunks (the parts between
    `// -----` lines; one unless it is a split file), in a fixed order."""
    paths = sorted(p for p in LIT.rglob("*") if p.suffix in (".mlir", ".test")
                   and "Output" not in p.parts)
    return [(str(p.relative_to(LIT)), re.split(r"(?m)^// -----\n", p.read_text()))
            for p in paths]


def op_names(texts: Sequence[str]) -> list[str]:
    return sorted({m.group(1) for text in texts for m in _OP.finditer(text)})


def _replace(text: str, match: re.Match[str], group: int, new: str, offset: int = 0) -> str:
    """`text` (which begins at `offset` of the matched string) with `match`'s `group` as `new`."""
    start, end = match.start(group) - offset, match.end(group) - offset
    return text[:start] + new + text[end:]


def _dims(rng: random.Random) -> str:
    return "".join(f"{rng.choice(DIMS)}x" for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 4))))


def _mutate(text: str, rng: random.Random, ops: Sequence[str]) -> tuple[str, str]:
    """One random mutation of `text`, and what it did; the text unchanged where it has nothing
    of the kind chosen."""
    kind = rng.choice(("delete token", "duplicate token", "swap tokens", "delete line",
                       "duplicate line", "number", "number", "shape", "every shape",
                       "every shape", "element type", "every element type", "op name",
                       "op name", "value name"))
    if kind == "every shape":  # the same dims everywhere: ops that took them still verify
        shapes = sorted({m.group(1) for m in _SHAPE.finditer(text)})
        if not shapes:
            return text, f"{kind}: none"
        old, new = rng.choice(shapes), _dims(rng)
        text = _SHAPE.sub(lambda m: _replace(m.group(), m, 1, new, m.start())
                          if m.group(1) == old else m.group(), text)
        return text, f"every shape {old!r} -> {new!r}"
    if kind == "every element type":
        present = sorted({m.group() for m in _ELEMENT.finditer(text)})
        if not present:
            return text, f"{kind}: none"
        old, new = rng.choice(present), rng.choice(ELEMENTS)
        text = _ELEMENT.sub(lambda m: new if m.group() == old else m.group(), text)
        return text, f"every {old!r} -> {new!r}"
    if kind in ("delete line", "duplicate line"):
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        if kind == "delete line":
            return "\n".join(lines[:i] + lines[i + 1:]), f"{kind} {i + 1}"
        j = rng.randrange(len(lines) + 1)
        return "\n".join(lines[:j] + [lines[i]] + lines[j:]), f"{kind} {i + 1} at {j + 1}"
    pattern, group = {"number": (_NUMBER, 0), "shape": (_SHAPE, 1), "element type": (_ELEMENT, 0),
                      "op name": (_OP, 1), "value name": (_VALUE, 0)}.get(kind, (_TOKEN, 0))
    matches = list(pattern.finditer(text))
    if not matches:
        return text, f"{kind}: none"
    m = rng.choice(matches)
    old = m.group(group)
    if kind == "delete token":
        return _replace(text, m, 0, ""), f"delete {old!r}"
    if kind == "duplicate token":
        return _replace(text, m, 0, f"{old} {old}"), f"duplicate {old!r}"
    if kind == "swap tokens":
        n = rng.choice(matches)
        a, b = sorted((m, n), key=lambda x: x.start())
        if a.start() == b.start():
            return text, "swap: same token"
        swapped = (text[:a.start()] + b.group() + text[a.end():b.start()] + a.group()
                   + text[b.end():])
        return swapped, f"swap {a.group()!r} and {b.group()!r}"
    new = {"number": lambda: rng.choice(NUMBERS), "shape": lambda: _dims(rng),
           "element type": lambda: rng.choice(ELEMENTS), "op name": lambda: rng.choice(ops),
           "value name": lambda: rng.choice(matches).group()}[kind]()
    return _replace(text, m, group, new), f"{kind} {old!r} -> {new!r}"


def make_case(inputs: Sequence[tuple[str, list[str]]], ops: Sequence[str], seed: int,
              index: int) -> Case:
    """Case `index` of the run with `seed`: one chunk of one lit file, mutated one to three
    times."""
    rng = random.Random(f"{seed}:{index}")
    pool = inputs
    if rng.random() < CLEAN_SHARE:  # most cases: a mutant of a valid input
        pool = [(p, [c for c in chunks if "error" not in c]) for p, chunks in inputs]
        pool = [(p, chunks) for p, chunks in pool if chunks]
    path, chunks = rng.choice(pool)
    text = rng.choice(chunks)
    n = next(i for i, c in enumerate(dict(inputs)[path]) if c is text)
    source = path if len(dict(inputs)[path]) == 1 else f"{path} chunk {n}"
    mutations = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        text, what = _mutate(text, rng, ops)
        mutations.append(what)
    return Case(index, source, tuple(mutations), text)


# ----------------------------------------------------------------------------------------------
# Running one case, in a worker


def _signature(error: BaseException) -> str:
    """The exception's type and the innermost tapeml frame it passed (else the innermost)."""
    frames = traceback.extract_tb(error.__traceback__)
    package = str(ROOT / "tapeml")
    ours = [f for f in frames if f.filename.startswith(package)]
    frame = (ours or frames)[-1]
    where = os.path.relpath(frame.filename, ROOT) if ours else Path(frame.filename).name
    return f"{type(error).__name__} in {where}:{frame.name}"


def _literal(t: Attribute) -> str:
    """An MLIR literal of type `t` that tapeml-run reads (0.5 everywhere; true for i1)."""
    from xdsl.dialects.builtin import ShapedType, i1

    element = t.get_element_type() if isinstance(t, ShapedType) else t
    value = "true" if element == i1 else "0.5"
    return f"dense<{value}> : {t}" if isinstance(t, ShapedType) else f"{value} : {t}"


def interpreter_argv(path: str) -> list[str]:
    """tapeml-run's arguments for the file at `path`: an argument of each type the function it
    runs takes (none when the file does not load: tapeml-run then says why)."""
    from xdsl.dialects import func

    from tapeml.tools.run import _context, _default_symbol, _load_module

    try:
        module = _load_module(_context(), path)
    except Exception:
        return [path]
    symbol = _default_symbol(module)
    functions = [op for op in module.walk() if isinstance(op, func.FuncOp)
                 and op.sym_name.data == symbol]
    if not functions:
        return [path]
    return [path, "--args", *(_literal(t) for t in functions[0].function_type.inputs.data)]


def run_in_process(tool: str, argv: Sequence[str]) -> dict:
    """Run `tapeml-opt argv` (or `tapeml-run`, `tool` "run") here: its exit status, its stderr,
    and the traceback (with its signature) of an exception it let through."""
    from tapeml.tools import opt, run

    main = run.main if tool == "run" else opt.main
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main(list(argv))
    except SystemExit as exit_:  # argparse
        rc = exit_.code if isinstance(exit_.code, int) else 1
    except Exception as error:  # what the oracle looks for
        return {"rc": None, "stderr": err.getvalue(), "signature": _signature(error),
                "traceback": traceback.format_exc(), "argv": list(argv)}
    return {"rc": rc, "stderr": err.getvalue(), "signature": None, "traceback": None,
            "argv": list(argv)}


def _serve() -> None:
    """The worker: one JSON request a line on stdin ({"text", "tool", "argv"}; tapeml-run's
    arguments are made here, to fit the function), one JSON answer a line on the protocol
    stream; the tools' own output goes to stderr, never into the protocol."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # C code writing to fd 1 (LLVM) cannot break the protocol
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.mlir")
        for line in sys.stdin:
            request = json.loads(line)
            with open(path, "w") as f:
                f.write(request["text"])
            tool = request["tool"]
            argv = interpreter_argv(path) if tool == "run" else [path, *request["argv"]]
            answer = run_in_process(tool, argv)
            answer["argv"] = ["case.mlir", *answer["argv"][1:]]
            protocol.write(json.dumps(answer) + "\n")
            protocol.flush()


WORKER = (sys.executable, __file__, "--worker")


class Worker:
    """A `_serve` process (`command`); `run` gives a case's answer, or a crash or hang (then the
    process is gone and the next `run` starts another)."""

    def __init__(self, timeout: float, command: Sequence[str] = WORKER) -> None:
        self.timeout = timeout
        self.command = list(command)
        self.process: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (the worker's stderr; close() closes it)

    def _start(self) -> subprocess.Popen:
        self.log.seek(0)
        self.log.truncate()
        return subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self.log, text=True, cwd=ROOT)

    def run(self, text: str, argv: Sequence[str], tool: str = "opt") -> dict:
        """`tool` ("opt" or "run") on `text` with `argv` (for "run", arguments that fit)."""
        if self.process is None:
            self.process = self._start()
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        request = {"text": text, "tool": tool, "argv": list(argv)}
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it died: the read below finds out how
        ready, _, _ = select.select([process.stdout], [], [], self.timeout)
        if ready and (line := process.stdout.readline()):
            return json.loads(line)
        self.process = None
        if not ready:
            process.kill()
            process.wait()
            return {"hang": True}
        rc = process.wait()
        self.log.seek(0)
        tail = self.log.read().decode(errors="replace")[-2000:]
        return {"crash": rc, "stderr": tail}

    def close(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait()
        self.log.close()


# ----------------------------------------------------------------------------------------------
# The oracle and the run


@dataclass(frozen=True)
class Failure:
    kind: str
    signature: str
    case: Case
    pipeline: tuple[str, ...]
    command: str
    """The command line that failed, on the case's text as `case.mlir`."""
    detail: str

    def report(self) -> str:
        return (f"{self.kind}: {self.signature}\n  case {self.case.index} (from lit/"
                f"{self.case.source}: {'; '.join(self.case.mutations)})\n"
                f"  {self.command}\n{_indent(self.detail)}")


def _quote(arg: str) -> str:
    return f"'{arg}'" if " " in arg else arg


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().split("\n")[-25:])


_LOCATED = re.compile(r"\S+:\d+:\d+: error: ")
_DIGITS = re.compile(r"\d+")


def judge(answer: dict, case: Case, pipeline: tuple[str, ...]) -> Failure | None:
    """The oracle: None when the run ended as a user's mistake or a success should (a mistake
    found while parsing and verifying, with no pipeline, located as `file:line:col: error:`)."""
    def failure(kind: str, signature: str, detail: str) -> Failure:
        if pipeline == INTERPRET:
            command = "tapeml-run " + " ".join(map(_quote, answer.get("argv", ["case.mlir"])))
        else:
            command = "tapeml-opt " + " ".join(case.argv("case.mlir", pipeline))
        return Failure(kind, signature, case, pipeline, command, detail)

    if "hang" in answer:
        return failure("hang", f"timeout in {' '.join(pipeline) or 'tapeml-opt'}", "")
    if "crash" in answer:
        rc = answer["crash"]
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        return failure("crash", f"{how} in {' '.join(pipeline) or 'tapeml-opt'}", answer["stderr"])
    if answer["traceback"] is not None:
        return failure("traceback", answer["signature"], answer["traceback"])
    stderr, rc = answer["stderr"], answer["rc"]
    if "Traceback (most recent call last)" in stderr:
        return failure("traceback printed", "a traceback on stderr", stderr)
    if rc not in (0, 1):
        return failure("exit status", f"exit status {rc}", stderr)
    if rc == 1 and "error:" not in stderr:
        return failure("no diagnostic", "exit status 1 without error:", stderr)
    if rc == 1 and not pipeline and not _LOCATED.match(stderr):  # a mistake in the input
        message = stderr.split("\n")[0].partition("error: ")[2]
        return failure("unlocated diagnostic", _DIGITS.sub("N", message), stderr)
    return None


@dataclass
class Outcome:
    seed: int
    cases: int = 0
    runs: int = 0

    def __post_init__(self) -> None:
        self.succeeded: Counter[tuple[str, ...]] = Counter()
        """Runs of each pipeline that exited 0 (with no pipeline: the cases that parsed and
        verified, which the other pipelines then ran on)."""
        self.failures: list[Failure] = []
        self.lock = threading.Lock()

    def unknown(self) -> list[Failure]:
        return [f for f in self.failures if f.signature not in KNOWN]

    def known(self) -> list[Failure]:
        return [f for f in self.failures if f.signature in KNOWN]

    def summary(self) -> str:
        succeeded = ", ".join(f"{' '.join(p) or 'no pipeline'}: {self.succeeded[p]}"
                              for p in (*PIPELINES, INTERPRET))
        lines = [f"{self.cases} cases, {self.runs} runs of tapeml-opt and tapeml-run, "
                 f"{len(self.failures)} failures; exit status 0 with {succeeded}"]
        first: dict[str, Failure] = {}
        for f in sorted(self.failures, key=lambda f: len(f.case.text)):
            first.setdefault(f.signature, f)
        for signature, f in sorted(first.items()):
            count = sum(g.signature == signature for g in self.failures)
            tag = "known" if signature in KNOWN else "NEW"
            lines.append(f"[{tag}, {count}x] {f.report()}")
        if self.failures:
            lines.append(f"(python tests/fuzz_cli.py --seed {self.seed} --replay INDEX prints a "
                         "case's input)")
        return "\n".join(lines)


def _run_case(worker: Worker, case: Case, outcome: Outcome) -> None:
    """Run the case with no pipeline, then, if it parsed and verified, with the other pipelines
    and on tapeml-run."""
    for pipeline in (*PIPELINES, INTERPRET):
        if pipeline == INTERPRET:
            answer = worker.run(case.text, [], "run")
        else:
            answer = worker.run(case.text, case.argv("case.mlir", pipeline)[1:])
        failure = judge(answer, case, pipeline)
        with outcome.lock:
            outcome.runs += 1
            outcome.succeeded[pipeline] += answer.get("rc") == 0
            if failure is not None:
                outcome.failures.append(failure)
        if not pipeline and answer.get("rc") != 0:
            return


def main(cases: int, seed: int, workers: int = 2, timeout: float = TIMEOUT_S,
         indices: Sequence[int] | None = None) -> Outcome:
    """Run `cases` cases of `seed` (or only those of `indices`) on `workers` processes."""
    inputs = lit_inputs()
    ops = op_names([chunk for _, chunks in inputs for chunk in chunks])
    todo: Queue[Case] = Queue()
    for index in range(cases) if indices is None else indices:
        todo.put(make_case(inputs, ops, seed, index))
    outcome = Outcome(seed, cases=todo.qsize())

    def work() -> None:
        worker = Worker(timeout)
        try:
            while True:
                try:
                    case = todo.get_nowait()
                except Empty:
                    return
                _run_case(worker, case, outcome)
        finally:
            worker.close()

    threads = [threading.Thread(target=work) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcome


def _cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per run")
    parser.add_argument("--replay", type=int, nargs="*", metavar="INDEX",
                        help="run only these cases, and print their inputs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _serve()
        return 0
    outcome = main(args.cases, args.seed, args.workers, args.timeout, args.replay)
    if args.replay:
        inputs = lit_inputs()
        ops = op_names([chunk for _, chunks in inputs for chunk in chunks])
        for index in args.replay:
            print(f"// case {index}\n{make_case(inputs, ops, args.seed, index).text}")
    print(outcome.summary())
    return 1 if outcome.unknown() else 0


if __name__ == "__main__":
    sys.exit(_cli())

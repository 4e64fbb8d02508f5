"""tapeml-opt and tapeml-run survive mutants of every lit input: a bounded run of tests/fuzz_cli.py
(`make fuzz` runs a long one), and the fuzzer's oracle catching each kind of failure it seeks."""

from __future__ import annotations

import sys

import pytest
from fuzz_cli import (  # tests/fuzz_cli.py
    INTERPRET,
    KNOWN,
    PIPELINES,
    WORKER,
    Case,
    Worker,
    judge,
    main,
    run_in_process,
)

CASES = 150  # make fuzz runs 5000
SEED = 0

_CASE = Case(0, "nowhere.mlir", ("none",), "func.func @f() {\n  func.return\n}\n")


def test_no_mutant_crashes_hangs_or_shows_a_traceback():
    outcome = main(CASES, SEED, workers=2)
    # the mutants reach every pipeline: a fuzzer whose inputs are all refused tests little
    assert all(outcome.succeeded[p] >= 3 for p in (*PIPELINES, INTERPRET)), outcome.summary()
    assert not outcome.unknown(), outcome.summary()
    if outcome.known():
        pytest.xfail("known tracebacks (see tests/fuzz_cli.py KNOWN): "
                     + "; ".join(sorted({f.signature for f in outcome.known()})))


def test_the_oracle_accepts_a_success_and_a_diagnostic():
    assert judge({"rc": 0, "stderr": "", "traceback": None}, _CASE, ()) is None
    answer = {"rc": 1, "stderr": "case.mlir:1:1: error: nope\n", "traceback": None}
    assert judge(answer, _CASE, ()) is None


def test_the_oracle_wants_a_mistake_in_the_input_located():
    answer = {"rc": 1, "stderr": "tapeml-opt: error: nope\n", "traceback": None}
    assert judge(answer, _CASE, ()).kind == "unlocated diagnostic"
    assert judge(answer, _CASE, ("-p", "tape-to-llvm")) is None  # a pass's own refusal


def test_the_oracle_refuses_a_silent_failure_and_an_odd_exit_status():
    answer = {"rc": 1, "stderr": "", "traceback": None}
    assert judge(answer, _CASE, ()).kind == "no diagnostic"
    answer = {"rc": 2, "stderr": "usage: ...", "traceback": None}
    assert judge(answer, _CASE, ()).kind == "exit status"


def test_an_exception_through_main_is_a_traceback_with_its_signature(monkeypatch):
    from tapeml.tools import opt

    def main(argv):
        raise KeyError("boom")

    monkeypatch.setattr(opt, "main", main)
    answer = run_in_process("opt", ["case.mlir"])
    failure = judge(answer, _CASE, ())
    assert failure.kind == "traceback"
    assert failure.signature == "KeyError in test_cli_fuzz.py:main"  # not in tapeml: the file


def test_a_worker_that_dies_is_a_crash_and_one_that_stops_answering_a_hang():
    segfault = "import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)"
    worker = Worker(timeout=30, command=[sys.executable, "-c", segfault])
    failure = judge(worker.run("", []), _CASE, ("-p", "tape-to-llvm"))
    assert (failure.kind, failure.signature) == ("crash", "signal SIGSEGV in -p tape-to-llvm")
    sleeper = "import sys, time; sys.stdin.readline(); time.sleep(60)"
    worker = Worker(timeout=1, command=[sys.executable, "-c", sleeper])
    assert judge(worker.run("", []), _CASE, ()).kind == "hang"


def test_a_worker_answers_again_after_a_crash():
    worker = Worker(timeout=60, command=WORKER)
    try:
        answer = worker.run(_CASE.text, [])
        assert (answer["rc"], answer["traceback"]) == (0, None)
        worker.process.kill()
        worker.process.wait()
        assert "crash" in worker.run(_CASE.text, [])
        assert worker.run(_CASE.text, [])["rc"] == 0  # a fresh process
    finally:
        worker.close()


@pytest.mark.parametrize("signature", sorted(KNOWN))
def test_each_known_traceback_still_happens(signature, tmp_path):
    reproducer = KNOWN[signature]
    path = tmp_path / "f.mlir"
    path.write_text(reproducer.text)
    answer = run_in_process(reproducer.tool, [str(path), *reproducer.argv])
    assert answer["signature"] == signature, f"fixed? then delete KNOWN[{signature!r}]"

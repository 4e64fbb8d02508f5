"""`tapeml-opt --help` lists tapeml's passes, with every option, and its targets, before xDSL's."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from tapeml import universe


def test_help_lists_every_tapeml_pass_option_and_target_first():
    text = subprocess.run([sys.executable, "-m", "tapeml.tools.opt", "--help"],
                          capture_output=True, text=True, check=True).stdout
    ours, _, rest = text.partition("xDSL's passes and targets are listed")
    assert "apply-pdl" in rest and "apply-pdl" not in ours  # xDSL's passes come after
    lines = ours.splitlines()
    for name, factory in {**universe.PASSES, "convert-scf-to-cf": universe.scf_to_cf}.items():
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        options = {line.split("=")[0].strip() for line in lines[at + 1:]
                   if line.startswith("    ") and "=" in line.split()[0]}
        for field in dataclasses.fields(factory()):
            assert field.name in options, f"{name}'s option {field.name} is not in --help"
    for name in [*universe.TARGETS, "llvm"]:
        assert any(line.split()[:1] == [name] for line in lines), f"-t {name} not in --help"

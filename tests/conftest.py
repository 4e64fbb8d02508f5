"""The suite compiles afresh: the disk cache (tapeml/codegen/disk_cache.py) is off unless a test
turns it on (test_disk_cache.py), so no test depends on what an earlier test or run stored,
and nothing is written under ~/.cache. And it runs with TAPEML_CHECKS (tapeml/checks.py): every
traced module is verified, and every backend pipeline verifies its module after each pass.
Set here, before any test runs, so the child processes the tests start inherit it."""

import os

os.environ["TAPEML_CACHE"] = "0"
os.environ["TAPEML_CHECKS"] = "1"

"""The loops of each tape op family for tape-to-loops (tapeml/transforms/to_loops.py)."""

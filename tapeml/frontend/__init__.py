"""The user-facing front end: programs traced from Python functions, their gradients, jit,
layers and optimizers (the tracing core they build on is tapeml/tracing)."""

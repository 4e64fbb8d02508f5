"""The user-facing front end: tracing Python functions into tape programs, the ops they call
(eagerly on arrays or recorded under a trace), layers and optimizers."""

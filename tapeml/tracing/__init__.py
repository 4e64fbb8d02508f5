"""The tracing core: tracers and the trace they record into (`trace`), the ops a traced or eager
program calls (`ops`, the numpy-like API that binds tape ops), and pytrees (`pytree`).

It sits between the dialects and everything that builds tape: the front end traces user
functions with it, and tape-differentiate writes the backward ops with the same ops. It imports
the dialects and the interpreter (eager ops run there), never transforms, backends or the front
end.
"""

"""`tapeml.jit`: capture a function on its first call, compile it, replay it after.

The cache key is the structure of the arguments, the shape and dtype of every array in them
(a Python number is a weak scalar, whatever its value), and the static arguments by type and
value. A miss traces and compiles again; the cache keeps the `cache_size` most recently used
compilations. `explain()` says why each compilation happened, and which came from the
disk cache (tapeml/codegen/disk_cache.py: a new process compiles a program seen before in no
time). As in JAX, what the function
reads from its enclosing scope (arrays, numbers, flags) is compiled in as it was on the
compiling call: later changes to it are not seen until a recompilation, so pass what changes
as an argument.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tapeml.codegen import Compiled, get_backend
from tapeml.errors import a_or_an
from tapeml.frontend.batch_sizes import BatchSizes
from tapeml.frontend.program import Spec, argument_paths, is_device_array, trace
from tapeml.profile import KernelProfile
from tapeml.tracing.pytree import LEAF, TreeDef, flatten, unflatten
from tapeml.tracing.trace import Tracer, is_weak_scalar, runtime_leaf


def _leaf_key(x: Any) -> tuple:
    if type(x) is np.ndarray or isinstance(x, np.generic):  # (an int8 scalar is no int32 one:
        return x.shape, x.dtype                              # the trace refuses it, as arrays)
    if is_weak_scalar(x):
        return (), "weak float" if isinstance(x, float) else "weak int"
    if isinstance(x, Spec):
        raise TypeError("jit: a compiled function runs on arrays, got a tapeml.Spec; for "
                        "shapes alone use tapeml.eval_shape, for the compiled stages .lower()")
    spec = Spec.of(x)
    return spec.shape, spec.dtype


def _array_tree_key(node: Any, leaves: list[np.ndarray], key: list[Any]) -> bool:
    """Whether `node` is a pytree of numpy arrays only (tuples, lists, dicts, None; no
    subclasses): then its arrays are appended to `leaves` in `flatten`'s order and its
    structure, with each array's shape and dtype, to `key` (a type marks each node, then its
    length or keys; an array is its shape, then its dtype: one reading, so two calls share a
    key only where `flatten` gives them one structure and `_leaf_key` the same keys)."""
    kind = type(node)
    if kind is np.ndarray:
        leaves.append(node)
        key.append(node.shape)
        key.append(node.dtype)
        return True
    if kind is tuple or kind is list:
        key.append(kind)
        key.append(len(node))
        for child in node:  # noqa: SIM110 (all() over a generator cost a third more)
            if not _array_tree_key(child, leaves, key):
                return False
        return True
    if kind is dict:
        try:
            names = tuple(sorted(node))
        except TypeError:  # (the general path reports it)
            return False
        key.append(dict)
        key.append(names)
        for name in names:  # noqa: SIM110
            if not _array_tree_key(node[name], leaves, key):
                return False
        return True
    if node is None:
        key.append(None)
        return True
    return False


@functools.lru_cache(maxsize=64)
def _arrays_tree(count: int) -> TreeDef:
    """The structure of `count` positional arrays and no keywords: what `flatten` gives."""
    return flatten((tuple(np.empty(0) for _ in range(count)), {}))[1]


def _static_key(x: Any) -> Any:
    """A static argument by type and value: 1, 1.0 and True compile apart, as in JAX; a float
    by its bits (0.0 and -0.0 apart, a NaN equal to itself: it had compiled at every call)."""
    if isinstance(x, tuple):
        return tuple, tuple(_static_key(item) for item in x)
    if isinstance(x, float | np.floating):
        return type(x), float(x).hex()
    hash(x)  # an unhashable static argument is reported by the caller
    return type(x), x


def _argnums(name: str, argnums: Any) -> tuple[int, ...]:
    """static_argnums or batch_argnums as a tuple of ints (numpy integers too; None: none),
    each once, as JAX's (an argument named twice is one argument)."""
    if argnums is None:
        return ()
    numbers = (argnums,) if isinstance(argnums, int | np.integer) else argnums
    try:
        numbers = tuple(numbers)
    except TypeError:
        numbers = (argnums,)
    for i in numbers:
        if not isinstance(i, int | np.integer) or isinstance(i, bool | np.bool_):
            raise TypeError(f"jit: {name} must be an int or a sequence of ints, got "
                            f"{argnums!r} (argument positions must be ints, not "
                            f"{type(i).__name__})")
    return tuple(dict.fromkeys(int(i) for i in numbers))


def _spec_text(spec: tuple) -> str:
    shape, dtype = spec
    if isinstance(dtype, str):
        return f"a {dtype} scalar"
    dtype = np.dtype(dtype)
    swapped = " (byte-swapped)" if not dtype.isnative else ""
    return f"{dtype.name}{list(shape)}{swapped}"


def _describe(signature: tuple) -> str:
    tree, specs = signature
    return f"{tree} with " + ", ".join(_spec_text(spec) for spec in specs)


def _leaf_arguments(args: tuple, static: tuple[int, ...]) -> list[int]:
    """The positional argument (its index in `args`) of each leaf of the dynamic ones, in
    `flatten`'s order."""
    return [i for i, arg in enumerate(args) if i not in static
            for _ in range(len(flatten(arg)[0]))]


def _batch_hint(before: tuple, after: tuple, arguments: list[int]) -> str:
    """Where a recompilation is for a new batch size alone (every leaf whose key changed
    changed only its leading axis, all from one size to one other, and every array of those
    leaves' arguments is among them), what would share one program between batch sizes."""
    changed: set[int] = set()
    sizes = set()
    for i, ((shape, dtype), (new_shape, new_dtype)) in enumerate(zip(before, after,
                                                                      strict=True)):
        if (shape, dtype) == (new_shape, new_dtype):
            continue
        if (dtype != new_dtype or isinstance(dtype, str) or not shape
                or len(shape) != len(new_shape) or shape[1:] != new_shape[1:]
                or i >= len(arguments)):
            return ""
        changed.add(arguments[i])
        sizes.add((shape[0], new_shape[0]))
    if len(sizes) != 1 or any(arguments[i] in changed and before[i] == after[i]
                              for i in range(len(arguments))):
        return ""
    (old, new), = sizes
    numbers = sorted(changed)
    argnums = f"({numbers[0]},)" if len(numbers) == 1 else str(tuple(numbers))
    return (f"; a new batch size ({old} -> {new}) alone: jit(..., batch_argnums={argnums}) "
            "compiles one program for every batch size")


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while a program compiles: the IR is a graph of cycles it
    would walk again and again to free nothing (3-7% of W3's, W4's and the GPT step's first
    calls); what the compile leaves unreachable is collected once it is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class Jitted:
    """A function compiled per argument signature (see the module doc)."""

    def __init__(self, fn: Callable, backend: str, static_argnums: int | Sequence[int],
                 cache_size: int, options: dict[str, Any],
                 batch_argnums: int | Sequence[int] | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"jit: the function to compile must be callable, got "
                            f"{type(fn).__name__} {fn!r}")
        self.fn = fn
        self.backend = get_backend(backend, **options)
        if batch_argnums is not None and backend != "cpu":
            raise ValueError(f"jit: batch_argnums is the cpu backend's, not {backend}'s")
        self.batch = (None if batch_argnums is None
                      else BatchSizes(_argnums("batch_argnums", batch_argnums)))
        """batch_argnums' programs (tapeml/frontend/batch_sizes.py), if it was given."""
        self.static_argnums = _argnums("static_argnums", static_argnums)
        """As given, each once; negative ones count from the end of each call's positional
        arguments."""
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"jit: cache_size must be a positive int, got {cache_size!r}")
        self.cache_size = cache_size
        self.cache: OrderedDict[tuple, tuple[TreeDef, Compiled]] = OrderedDict()
        """Compilations by signature, least recently used first; the first is dropped past
        `cache_size`."""
        self._fast: dict[tuple, tuple[tuple, TreeDef, Compiled]] = {}
        """The compilations for calls of numpy arrays only (no static arguments, no keywords),
        by each array's type, shape and dtype where the arguments are arrays, else by
        `_array_tree_key` (pytrees of arrays: a model's parameters): `cache`'s key and entry.
        Replaced, never changed in place, so a reader on another thread sees an old dict or a
        new one."""
        self.log: list[str] = []
        self._last: tuple | None = None  # the signature of the latest compilation
        self._lock = threading.Lock()
        # its name and doc, not its __dict__: a jitted function's would be this one's state
        # (jit(step, backend=...) of a jitted step compiled with step's options)
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """As a function's (and jax.jit's): on an instance, this bound to it, the instance the
        first argument (`@tapeml.jit` on a method; `self` is then an argument like any other:
        a pytree of arrays, or static with static_argnums=0); on the class, or where it
        wraps a staticmethod, this."""
        if instance is None or isinstance(self.fn, staticmethod):
            return self
        return _Bound(self, instance)

    def _static_positions(self, count: int) -> tuple[int, ...]:
        """`static_argnums` as positions in a call with `count` positional arguments."""
        if all(0 <= i < count for i in self.static_argnums):
            return self.static_argnums
        for i in self.static_argnums:
            if not -count <= i < count:
                raise TypeError(f"jit: static_argnums {i} is out of range for a call with "
                                f"{count} positional argument{'s' if count != 1 else ''} "
                                "(static arguments are found by position: pass them "
                                "positionally, not by keyword)")
        return tuple(dict.fromkeys(i % count for i in self.static_argnums))  # (1 and -1: one)

    def _split(self, args: tuple) -> tuple[tuple, tuple, tuple[int, ...]]:
        positions = self._static_positions(len(args))
        static = tuple(args[i] for i in positions)
        dynamic = tuple(a for i, a in enumerate(args) if i not in positions)
        return static, dynamic, positions

    def _hashed_static(self, static: tuple) -> Any:
        """`_static_key` of the static arguments; a TypeError where one is not hashable."""
        try:
            return _static_key(static)
        except TypeError:
            raise TypeError(f"jit: static arguments {self.static_argnums} must be hashable, "
                            f"got {static!r} (an instance of your own class is where the class "
                            "defines both __eq__ and __hash__, or neither; a dataclass where it "
                            "is frozen=True)") from None

    def _entry(self, args: tuple, kwargs: dict
               ) -> tuple[tuple, list[Any], tuple[TreeDef, Compiled]]:
        static, dynamic, positions = self._split(args)
        static_key = self._hashed_static(static)
        arrays = not kwargs and all(type(a) is np.ndarray for a in dynamic)
        if arrays:  # the common call, arrays only: the same key, without walking a pytree
            leaves: list[Any] = list(dynamic)
            tree = _arrays_tree(len(leaves))
            specs = tuple((a.shape, a.dtype) for a in leaves)
        else:
            leaves, tree = flatten((dynamic, kwargs))
            specs = self._leaf_keys(leaves, args, kwargs, static, positions)
            leaves = [runtime_leaf(x) for x in leaves]
        key = (tree, specs, static_key)
        if (entry := self.cache.get(key)) is not None:
            try:  # (cheaper than contextlib.suppress on this path, taken on every call)  # noqa: SIM105
                self.cache.move_to_end(key)  # the most recently used
            except KeyError:  # dropped by another thread meanwhile; it is still valid here
                pass
            return dynamic, leaves, entry
        with self._lock:
            if (entry := self.cache.get(key)) is not None:  # compiled meanwhile
                return dynamic, leaves, entry
            hint = self.batch is None and getattr(self.backend, "name", None) == "cpu"
            last = self._last
            fn = self._with_static(static, positions)
            self.log.append(self._why((tree, specs), static,
                                      hint and _leaf_arguments(args, positions),
                                      lambda: argument_paths(fn, dynamic, kwargs)))
            try:
                with _no_cycle_collection():
                    generic, note = (None, "") if self.batch is None else self.batch.compile(
                        self.backend, fn, (dynamic, kwargs), tree, leaves, specs, static_key,
                        self.batch.batch_leaves(args, positions, dynamic))
                    if note:
                        self.log[-1] += "; " + note
                    if generic is None:
                        program = trace(fn, *dynamic, **kwargs)
                        generic = (program.out_tree,
                                   self.backend.compile(program.module, owned=True))
                    entry = generic
            except BaseException:  # no compilation: explain() neither logs it nor compares
                self.log.pop()      # the next one against it
                self._last = last
                raise
            if getattr(entry[1], "origin", None) == "disk cache":
                self.log[-1] += "; its machine code came from the disk cache"
            if (describe := getattr(entry[1], "describe", None)) is not None:
                self.log[-1] += "; " + describe()
            self.cache[key] = entry
            if len(self.cache) > self.cache_size:  # the least recently used goes
                dropped, _ = self.cache.popitem(last=False)
                self._fast = {k: v for k, v in self._fast.items() if v[0] != dropped}
            if not positions and not kwargs:  # __call__'s fast paths find it by its arrays
                tree_key: list[Any] = []
                if arrays:
                    fast_key = tuple((np.ndarray, a.shape, a.dtype) for a in dynamic)
                elif _array_tree_key(dynamic, [], tree_key):
                    fast_key = tuple(tree_key)
                else:  # (numbers or device arrays among the leaves)
                    return dynamic, leaves, entry
                self._fast = {**self._fast, fast_key: (key, *entry)}
            return dynamic, leaves, entry

    def _leaf_keys(self, leaves: list[Any], args: tuple, kwargs: dict, static: tuple,
                   positions: tuple[int, ...]) -> tuple:
        """Each leaf's key; a leaf that is no array, number or device array is a TypeError
        naming its argument (`args`: the call's, `static` at `positions`)."""
        keys = []
        for i, x in enumerate(leaves):
            if not isinstance(x, np.ndarray | np.generic | int | float | Spec) and \
                    not is_device_array(x):
                raise TypeError(self._not_an_array(i, x, args, kwargs, static, positions))
            keys.append(_leaf_key(x))
        return tuple(keys)

    def _not_an_array(self, i: int, x: Any, args: tuple, kwargs: dict, static: tuple,
                      positions: tuple[int, ...]) -> str:
        """What to say of leaf `i`, `x`, which jit cannot take: where it is a positional
        argument of its own (a method's `self`: jit binds it as a function is bound), that
        static_argnums would compile it in; where it is a namedtuple, that it is no pytree."""
        dynamic = tuple(a for p, a in enumerate(args) if p not in positions)
        path = argument_paths(self._with_static(static, positions), dynamic, kwargs)[i]
        text = f"jit: argument `{path}` is {a_or_an(type(x).__name__)}"
        if isinstance(x, tuple):  # (a namedtuple: flatten takes only plain tuples apart)
            return (f"{text}, a namedtuple, which jit does not take apart as it does a tuple: "
                    f"pass it as a tuple (tuple({path})) or a dict ({path}._asdict())")
        text += "; arguments are arrays, numbers or pytrees (tuples, lists, dicts) of them"
        arguments = _leaf_arguments(args, positions)
        if i < len(arguments) and args[arguments[i]] is x:
            text += (f"; to compile it in as a constant (a method's `self`, a configuration), "
                     f"make it static: jit(..., static_argnums={arguments[i]}); it must then be "
                     "hashable")
        return text

    def _with_static(self, static: tuple, positions: tuple[int, ...]) -> Callable:
        if not positions:
            return self.fn

        def call(*dynamic: Any, **kwargs: Any) -> Any:
            args, rest = [], iter(dynamic)
            for i in range(len(dynamic) + len(static)):
                args.append(static[positions.index(i)] if i in positions else next(rest))
            return self.fn(*args, **kwargs)

        call.__name__ = getattr(self.fn, "__name__", "f")
        try:  # the traced arguments keep their names: the signature without the static ones
            signature = inspect.signature(self.fn)
            kept = [p for i, p in enumerate(signature.parameters.values())
                    if i not in positions]
            call.__signature__ = signature.replace(parameters=kept)
        except (TypeError, ValueError):
            pass
        return call

    def _why(self, signature: tuple, static: tuple, arguments: list[int] | bool = False,
             paths: Callable[[], list[str]] | None = None) -> str:
        """The log's line for a compilation for `signature` and `static`; `arguments`, each
        leaf's positional argument (kwargs' leaves past them), where a hint at batch_argnums
        may be given; `paths`, the leaves' paths (`x`, `params.lin1.W`), asked for where a
        leaf changed."""
        name = getattr(self.fn, "__name__", "f")
        last, self._last = self._last, (signature, static)
        if last is None:
            return f"{name}: compiled for {_describe(signature)} (first call)"
        last_signature, last_static = last
        if last_signature[0] != signature[0]:
            reason = f"the argument structure changed from {last_signature[0]} to {signature[0]}"
        elif last_signature != signature:
            names = paths() if paths is not None else []
            changes = [f"{f'`{names[i]}`' if i < len(names) else f'leaf {i}'}: "
                       f"{_spec_text(a)} -> {_spec_text(b)}" for i, (a, b)
                       in enumerate(zip(last_signature[1], signature[1], strict=True))
                       if a != b]
            reason = "shapes or dtypes changed (" + "; ".join(changes) + ")"
            if last_static != static:
                reason += f"; static arguments changed from {last_static!r} to {static!r}"
            elif arguments:
                reason += _batch_hint(last_signature[1], signature[1], arguments)
        else:
            reason = f"static arguments changed from {last_static!r} to {static!r}"
        return f"{name}: recompiled: {reason}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs and not self.static_argnums:  # the common call: arrays, seen before
            leaves: tuple | list = args
            try:
                fast = self._fast.get(tuple([(type(a), a.shape, a.dtype) for a in args]))
            except AttributeError:  # a number, or a pytree (of arrays only: its own key)
                leaves, tree_key = [], []
                fast = (self._fast.get(tuple(tree_key))
                        if _array_tree_key(args, leaves, tree_key) else None)
            if fast is not None:
                key, out_tree, compiled = fast
                try:  # the most recently used  # noqa: SIM105 (cheaper, on every call)
                    self.cache.move_to_end(key)
                except KeyError:  # dropped by another thread meanwhile; still valid here
                    pass
                outputs = compiled(*leaves)
                return outputs[0] if out_tree is LEAF else unflatten(out_tree, list(outputs))
        if (kwargs or not all(type(a) is np.ndarray for a in args)) and any(
            isinstance(x, Tracer) for x in flatten((args, kwargs))[0]
        ):  # called while tracing (jit inside grad, trace or jit): its ops join that trace
            return self.fn(*args, **kwargs)
        _, leaves, (out_tree, compiled) = self._entry(args, kwargs)
        return unflatten(out_tree, list(compiled(*leaves)))

    def lower(self, *args: Any, **kwargs: Any) -> dict[str, str]:
        """Every stage of the compilation for these arguments, as text (traced and compiled
        afresh, with each stage printed; the cache is left as it was)."""
        static, dynamic, positions = self._split(args)
        program = trace(self._with_static(static, positions), *dynamic, **kwargs)
        return dict(self.backend.compile(program.module, stages=True).stages)

    def profile(self, *args: Any, repeat: int = 10, **kwargs: Any) -> KernelProfile:
        """Where a call's time goes, op by op: compiled afresh with each tape op's loops
        marked (tape-to-loops{profile=true}; the cache is left as it was), called once, then
        `repeat` times timed, each op's loops by a clock in the program (the GEMM kernels and
        thread-pool jobs they call included). The CPU backend's; one profile at a time."""
        if getattr(self.backend, "name", None) != "cpu":
            raise NotImplementedError(f"profile: the cpu backend's, not {self.backend.name}'s")
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise ValueError(f"profile: repeat (profile's own keyword: how many calls are "
                             f"timed) must be an int of at least 1, got {repeat!r}")
        static, dynamic, positions = self._split(args)
        self._hashed_static(static)
        program = trace(self._with_static(static, positions), *dynamic, **kwargs)
        native = self.backend.compile(program.module, profile=True)
        return native.profile([runtime_leaf(x) for x in flatten((dynamic, kwargs))[0]], repeat)

    def explain(self) -> str:
        """Why each compilation happened, oldest first."""
        return "\n".join(self.log) if self.log else "not compiled yet"


def jit(fn: Callable | None = None, *, backend: str = "cpu",
        static_argnums: int | Sequence[int] = (), cache_size: int = 16,
        batch_argnums: int | Sequence[int] | None = None, **options: Any) -> Any:
    """Compile `fn` for `backend` ("cpu", "cuda", or "interp" for the reference interpreter)
    on its first call with each argument signature. Usable as `@jit` or `@jit(backend=...)`.
    Backend options: cpu takes `fuse=True` and `libm=False` (True: libm's exp/log/tanh/erf instead
    of the vectorizable arithmetic, within 4 ulp of numpy either way); cuda takes `fuse=True`,
    `emulate=False` (True: the GPU kernels on xDSL's interpreter, no GPU needed), `arch=None`
    (sm_80 or sm_90; default the GPU's) and `gemm_tile=16`.

    `batch_argnums` (cpu): the positional arguments whose arrays all have the batch as their
    leading axis; the first call compiles one program for every batch size, and a call at a
    new batch size compiles only what differs (tapeml/frontend/batch_sizes.py)."""
    if fn is None:
        return lambda f: Jitted(f, backend, static_argnums, cache_size, options, batch_argnums)
    return Jitted(fn, backend, static_argnums, cache_size, options, batch_argnums)


class _Bound:
    """A Jitted bound to an instance (`Jitted.__get__`), as a bound method is: calling it,
    `lower` and `profile` pass the instance first; its name, doc, module and signature (less
    the instance) are the function's; copied, pickled or compared as a bound method is; the
    rest (`explain`, `cache`) is the Jitted's."""

    def __init__(self, jitted: Jitted, instance: Any) -> None:
        self.__func__, self.__self__ = jitted, instance
        for name in ("__doc__", "__module__", "__name__", "__qualname__", "__wrapped__"):
            if hasattr(jitted, name):
                setattr(self, name, getattr(jitted, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__(self.__self__, *args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> dict[str, str]:
        return self.__func__.lower(self.__self__, *args, **kwargs)

    def profile(self, *args: Any, **kwargs: Any) -> KernelProfile:
        return self.__func__.profile(self.__self__, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "__func__" not in self.__dict__:  # (copy's probes)
            raise AttributeError(name)
        return getattr(self.__func__, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *dir(self.__func__)})

    def __reduce__(self) -> tuple:
        return getattr, (self.__self__, self.__func__.__name__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bound) and other.__func__ is self.__func__ and \
            other.__self__ is self.__self__

    def __hash__(self) -> int:
        return hash((id(self.__func__), id(self.__self__)))

    @property
    def __signature__(self) -> inspect.Signature:
        signature = inspect.signature(self.__func__)
        return signature.replace(parameters=list(signature.parameters.values())[1:])

"""A built tdsl module as a PyTorch custom operator (``torch.library``).

::

    import tdsl as td
    f = td.build(s, [X, W, Y], target="llvm")          # Y[i, j] = sum_k X[i, k] * W[j, k]
    linear = td.to_torch(f)                             # = tdsl.integrations.torch.to_torch
    y = linear(x, w)                                    # torch CPU tensors in, a new tensor out
    linear.op                                           # torch.ops.tdsl.<name>.default

What the operator does:

* **Zero-copy.**  Tensors reach the kernel through DLPack (``np.from_dlpack``): no copy for
  contiguous CPU tensors (a non-contiguous input is made contiguous first).  A CUDA module
  takes CUDA tensors in place (``__cuda_array_interface__``); given CPU tensors it copies
  them to the GPU and back.
* **Checked.**  Rank, dtype and device are checked by the operator, every size (symbolic
  ones included) and layout by the kernel's own argument check, before native code runs;
  errors are ``tdsl.ShapeError``/``tdsl.DTypeError``.
* **Outputs allocated** (the default, ``allocate_outputs=True``): the operator takes the
  inputs only and returns the outputs (a tuple when there are several), shaped from the
  inputs.  With ``allocate_outputs=False`` it takes every argument and writes the outputs in
  place (its schema marks them mutated), returning nothing.
* **Direct calls.**  Called on plain contiguous CPU tensors with nothing to differentiate
  and no tracing active, an LLVM operator skips PyTorch's dispatcher: the first call with
  given input shapes goes through the operator and all its checks, later ones with the same
  shapes launch the kernel on the tensors' data pointers (about 15 us a call instead of ~120).
* **torch.compile.**  A fake (meta) implementation computes the output shapes from the
  inputs', symbolic sizes included, so the operator is one opaque node in the graph.
* **Autograd.**  ``backward=`` gives the gradient, computed by another tdsl kernel:

  - a built module whose *inputs* are, in order: the forward inputs listed in
    ``saved_inputs`` (default: all of them), the forward outputs listed in ``saved_outputs``
    (default: none), then one gradient per forward output; and whose *outputs* are the
    gradients of the forward inputs listed in ``grad_inputs`` (default: all of them), in that
    order.  Only the listed tensors are saved for the backward pass.  E.g. ``y = sigmoid(x)``
    with ``dx = dy * y * (1 - y)``: ``saved_inputs=[], saved_outputs=[0]``, a kernel
    ``(y, dy) -> dx``;
  - or any callable ``backward(saved_inputs, saved_outputs, grad_outputs) -> grads`` (tuples
    of tensors; one gradient per forward input, None for none) for a gradient made of several
    kernels.

  Double backward is not supported.  Without ``backward=``, the operator still takes
  tensors that require grad, but a backward pass through it raises ``TDSLError`` (rather
  than leaving the inputs' gradients silently ``None``).

Outputs are the parameters the kernel writes (``tdsl.integrations.numpy.signature(f)`` lists
roles); every symbolic size must be the extent of some input dimension for outputs to be
allocated.
"""
from __future__ import annotations

import itertools
import keyword
import re
from typing import Any, Optional, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError, TDSLError
from ..keywords import check_keywords
from ..stmt import PrimFunc
from . import numpy as tnp

try:
    import torch
except ImportError:  # pragma: no cover - exercised only without torch
    torch = None  # type: ignore[assignment]

NAMESPACE = "tdsl"


def _current_dispatch_mode() -> Any:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    return _get_current_dispatch_mode()

#: every operator registered in this process: qualified name -> TorchOp.  The libraries must
#: stay alive for as long as any compiled graph may call the operator.
_REGISTERED: dict[str, "TorchOp"] = {}
_LIBRARY: Any = None
_counter = itertools.count()


def _require_torch() -> Any:
    if torch is None:
        raise TDSLError("to_torch needs PyTorch (pip install torch)")
    return torch


_TORCH_DTYPES: dict = {} if torch is None else {
    "bool": torch.bool, "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32,
    "int64": torch.int64, "float16": torch.float16, "float32": torch.float32,
    "float64": torch.float64}


def _torch_dtype(dtype: Any) -> Any:
    _require_torch()
    return _TORCH_DTYPES[str(dtype)]


def _ident(name: str, taken: set) -> str:
    s = re.sub(r"\W", "_", name) or "x"
    if s[0].isdigit():
        s = "_" + s
    if keyword.iskeyword(s) or s in ("self", "out", "Tensor", "None"):
        s = s + "_"
    base, k = s, 1
    while s in taken:
        s, k = f"{base}_{k}", k + 1
    taken.add(s)
    return s


def _module_kind(f: Any) -> str:
    kind = {"llvm": "llvm", "llvm-so": "llvm", "cuda": "cuda"}.get(getattr(f, "type_key", None))
    if kind is None:
        raise TDSLError(f"to_torch: expected a module built for 'llvm' or 'cuda', got {f!r}")
    return kind


def _unique_name(base: str) -> str:
    name = base
    while f"{NAMESPACE}::{name}" in _REGISTERED:
        name = f"{base}_{next(_counter)}"
    return name


class TorchOp:
    """A tdsl kernel registered as ``torch.ops.tdsl.<name>``; call it like the op.

    ``inputs``/``outputs``: the kernel's parameters in each role (``ParamInfo``);
    ``op``: the torch ``OpOverload`` (use it directly in code that ``torch.compile`` traces,
    or call this object: it forwards to ``op``); ``module``: the tdsl module.
    """

    def __init__(self, module: Any, name: str, allocate_outputs: bool, emulate: bool):
        self.module = module
        self.func: PrimFunc = module.func
        self.name = name
        self.qualname = f"{NAMESPACE}::{name}"
        self.allocate_outputs = allocate_outputs
        self.emulate = emulate
        self.kind = _module_kind(module)
        sig = tnp.signature(self.func)
        self.inputs = [p for p in sig if p.role == "input"]
        self.outputs = [p for p in sig if p.role == "output"]
        if not self.outputs:
            raise TDSLError(f"to_torch: '{self.func.name}' writes none of its parameters, so it "
                            f"has no output")
        self.plan = tnp.plan(self.func)
        if allocate_outputs:
            self.plan.check_allocatable()   # every output shape must follow from the inputs
        self.all_params = sorted(self.inputs + self.outputs, key=lambda q: q.index)
        self._out_dtypes = [_torch_dtype(p.dtype) for p in self.outputs]
        self.backward: Any = None
        self.op: Any = None
        #: input shapes -> (output shapes, size bindings) of calls already checked in full;
        #: bounded, since a dynamic dimension could otherwise grow it without end
        self._direct: "dict[tuple, tuple[list, dict]]" = {}

    # ---- schema and registration ---------------------------------------------------------
    def schema(self) -> str:
        taken: set = set()
        if self.allocate_outputs:
            args = ", ".join(f"Tensor {_ident(p.name, taken)}" for p in self.inputs)
            rets = "Tensor" if len(self.outputs) == 1 else \
                "(" + ", ".join("Tensor" for _ in self.outputs) + ")"
            return f"({args}) -> {rets}"
        params = []
        alias = iter("abcdefghijklmnopqrstuvwxyz")
        out_idx = {p.index for p in self.outputs}
        for p in sorted(self.inputs + self.outputs, key=lambda q: q.index):
            mut = f"({next(alias)}!)" if p.index in out_idx else ""
            params.append(f"Tensor{mut} {_ident(p.name, taken)}")
        return f"({', '.join(params)}) -> ()"

    def _register(self) -> None:
        global _LIBRARY
        t = _require_torch()
        if _LIBRARY is None:
            _LIBRARY = t.library.Library(NAMESPACE, "FRAGMENT")
        lib = _LIBRARY
        lib.define(self.name + self.schema())
        keys = ["CPU"] if self.kind == "llvm" else ["CPU", "CUDA"]
        for key in keys:
            lib.impl(self.name, self._impl, key)
        t.library.register_fake(self.qualname, self._fake, lib=lib)
        self.op = getattr(getattr(t.ops, NAMESPACE), self.name).default
        _REGISTERED[self.qualname] = self

    # ---- checks shared by the real and the fake implementation ---------------------------
    def _check(self, tensors: Sequence[Any], params: Sequence[tnp.ParamInfo]) -> None:
        t = _require_torch()
        if len(tensors) != len(params):
            names = ", ".join(p.name for p in params)
            raise ShapeError(f"{self.qualname} takes {len(params)} tensor(s) ({names}), got "
                             f"{len(tensors)}")
        dev = None
        for x, p in zip(tensors, params):
            if not isinstance(x, t.Tensor):
                raise DTypeError(f"{self.qualname}: argument '{p.name}' must be a torch.Tensor, "
                                 f"got {type(x).__name__}")
            want = _TORCH_DTYPES[p.dtype]
            if x.dtype != want:
                raise DTypeError(f"{self.qualname}: argument '{p.name}' has dtype {x.dtype}, "
                                 f"expected {want}; convert it with .to({want})")
            if x.dim() != len(p.shape):
                raise ShapeError(f"{self.qualname}: argument '{p.name}' has {x.dim()} "
                                 f"dimension(s) (shape {tuple(x.shape)}), expected "
                                 f"{len(p.shape)} ({', '.join(p.shape)})")
            if x.device.type not in ("cpu", "meta") and not (
                    self.kind == "cuda" and x.device.type == "cuda" and not self.emulate):
                where = "CPU" if self.kind == "llvm" or self.emulate else "CPU or CUDA"
                raise DTypeError(f"{self.qualname}: argument '{p.name}' is on {x.device}; this "
                                 f"{self.kind} kernel takes {where} tensors")
            if dev is None:
                dev = x.device
            elif x.device != dev:
                raise DTypeError(f"{self.qualname}: arguments on different devices ({dev} and "
                                 f"{x.device})")

    def _run(self, args: list) -> None:
        if self.emulate:
            self.module.emulate(*[np.from_dlpack(a) for a in args])
        else:
            self.module(*args)

    def _impl(self, *tensors: Any) -> Any:
        t = _require_torch()
        if not self.allocate_outputs:
            params = self.all_params
            self._check(tensors, params)
            args = [x.detach().contiguous() if p.role == "input" else x.detach()
                    for x, p in zip(tensors, params)]
            for x, p in zip(args, params):
                if p.role == "output" and not x.is_contiguous():
                    raise ShapeError(f"{self.qualname}: output '{p.name}' is not contiguous; "
                                     f"pass a contiguous tensor (the kernel writes it in place)")
            self._run(args)
            return None
        self._check(tensors, self.inputs)
        ins = [x.detach().contiguous() for x in tensors]   # detach: no copy, DLPack-exportable
        shapes = self.plan.shapes([tuple(x.shape) for x in ins])
        dev = ins[0].device if ins else t.device("cpu")
        outs = [t.empty(s, dtype=dt, device=dev) for s, dt in zip(shapes, self._out_dtypes)]
        self._run(self.plan.merge(ins, outs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _fake(self, *tensors: Any) -> Any:
        t = _require_torch()
        if not self.allocate_outputs:
            self._check(tensors, self.all_params)
            return None
        self._check(tensors, self.inputs)
        shapes = self.plan.shapes([tuple(x.shape) for x in tensors], t.sym_min, t.sym_max)
        like = tensors[0]
        outs = [like.new_empty(s, dtype=dt) for s, dt in zip(shapes, self._out_dtypes)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    # ---- autograd ----------------------------------------------------------------------------
    def _positions(self, what: str, given: Optional[Sequence[int]], count: int,
                   default: Sequence[int]) -> list[int]:
        pos = list(default) if given is None else [int(i) for i in given]
        if any(not 0 <= i < count for i in pos) or len(set(pos)) != len(pos):
            raise TDSLError(f"{self.qualname}: {what}={pos} must be distinct positions in "
                            f"0..{count - 1}")
        return pos

    def _register_autograd(self, backward: Any, saved_inputs: Optional[Sequence[int]],
                           saved_outputs: Sequence[int],
                           grad_inputs: Optional[Sequence[int]]) -> None:
        t = _require_torch()
        n_in, n_out = len(self.inputs), len(self.outputs)
        keep_in = self._positions("saved_inputs", saved_inputs, n_in, range(n_in))
        keep_out = self._positions("saved_outputs", saved_outputs, n_out, ())
        if callable(backward) and not hasattr(backward, "func"):
            user = backward

            def grads_of(inputs: tuple, outputs: tuple, gouts: tuple) -> tuple:
                g = user(inputs, outputs, gouts)
                g = tuple(g) if isinstance(g, (tuple, list)) else (g,)
                if len(g) != n_in:
                    raise TDSLError(f"{self.qualname}: backward returned {len(g)} gradient(s), "
                                    f"expected {n_in} (one per input, None for none)")
                return g
        else:
            bw = backward if isinstance(backward, TorchOp) else \
                to_torch(backward, name=_unique_name(self.name + "_backward"))
            targets = self._positions("grad_inputs", grad_inputs, n_in, range(n_in))
            want_in = len(keep_in) + len(keep_out) + n_out
            if len(bw.inputs) != want_in or len(bw.outputs) != len(targets):
                order = ", ".join([f"input {self.inputs[i].name}" for i in keep_in]
                                  + [f"output {self.outputs[j].name}" for j in keep_out]
                                  + [f"grad of {p.name}" for p in self.outputs])
                raise TDSLError(
                    f"{self.qualname}: the backward kernel '{bw.func.name}' takes "
                    f"{len(bw.inputs)} input(s) and writes {len(bw.outputs)} output(s); expected "
                    f"{want_in} inputs ({order}) and {len(targets)} outputs (the gradients of "
                    f"inputs {targets}); see saved_inputs, saved_outputs and grad_inputs")
            for k, i in enumerate(targets):
                if bw.outputs[k].dtype != self.inputs[i].dtype:
                    raise DTypeError(f"{self.qualname}: the backward kernel's output "
                                     f"'{bw.outputs[k].name}' is {bw.outputs[k].dtype} but input "
                                     f"'{self.inputs[i].name}' is {self.inputs[i].dtype}")
            self.backward = bw

            def grads_of(inputs: tuple, outputs: tuple, gouts: tuple) -> tuple:
                res = bw.op(*inputs, *outputs, *gouts)
                res = res if isinstance(res, (tuple, list)) else (res,)
                g: list = [None] * n_in
                for k, i in enumerate(targets):
                    g[i] = res[k]
                return tuple(g)

        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            outs = tuple(output) if isinstance(output, (tuple, list)) else (output,)
            ctx.save_for_backward(*(inputs[i] for i in keep_in), *(outs[j] for j in keep_out))

        def backward_fn(ctx: Any, *grads: Any) -> Any:
            saved = ctx.saved_tensors
            ins, outs = saved[:len(keep_in)], saved[len(keep_in):]
            gouts = tuple(g.contiguous() for g in grads)
            return grads_of(tuple(ins), tuple(outs), gouts)

        t.library.register_autograd(self.qualname, backward_fn, setup_context=setup_context,
                                    lib=_LIBRARY)

    def _register_no_gradient(self) -> None:
        """An autograd kernel that refuses: backward through an operator that has no
        ``backward=`` must fail loudly, not leave the inputs' ``.grad`` at None."""
        t = _require_torch()
        qualname = self.qualname

        def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
            pass

        def backward_fn(ctx: Any, *grads: Any) -> Any:
            raise TDSLError(
                f"{qualname} has no gradient: it was made by tdsl.to_torch(f) without "
                f"backward=, so gradients cannot flow back to its inputs.  Give "
                f"to_torch(f, backward=<built gradient kernel or function>), or call it on "
                f"detached tensors / under torch.no_grad() if no gradient is needed")

        t.library.register_autograd(qualname, backward_fn, setup_context=setup_context,
                                    lib=_LIBRARY)

    # ---- calling -----------------------------------------------------------------------------
    def __call__(self, *tensors: Any) -> Any:
        if self._direct_ok(tensors):
            return self._call_direct(tensors)
        return self.op(*tensors)

    def _direct_ok(self, tensors: Sequence[Any]) -> bool:
        """Whether a call may skip PyTorch's dispatcher (~100 us of the call): an LLVM kernel
        returning new outputs, plain contiguous CPU tensors of the right dtypes, nothing that
        needs autograd, and no tracing, dispatch mode or functorch transform that must see
        the operator."""
        t = torch
        if (getattr(self.module, "type_key", None) != "llvm" or not self.allocate_outputs
                or len(tensors) != len(self.inputs)
                or t.compiler.is_compiling() or t._C._are_functorch_transforms_active()
                or _current_dispatch_mode() is not None):
            return False
        grad = t.is_grad_enabled()
        for x, p in zip(tensors, self.inputs):
            if (type(x) is not t.Tensor or x.device.type != "cpu" or not x.is_contiguous()
                    or x.dtype != _TORCH_DTYPES[p.dtype] or (grad and x.requires_grad)):
                return False
        return True

    def _call_direct(self, tensors: Sequence[Any]) -> Any:
        """Run the kernel on data pointers; the first call with these shapes goes through
        the operator (every check, every error message) and records the result's shapes."""
        key = tuple(tuple(x.shape) for x in tensors)
        known = self._direct.get(key)
        if known is None:
            res = self.op(*tensors)
            outs = res if isinstance(res, tuple) else (res,)
            if all(x.numel() for x in tuple(tensors) + outs):   # empty arrays: checked path
                arrs = self.plan.merge([x.detach().numpy() for x in tensors],
                                       [o.numpy() for o in outs])
                sizes = self.module.bind(arrs)[1]
                if len(self._direct) >= 64:
                    self._direct.clear()
                self._direct[key] = ([tuple(o.shape) for o in outs], sizes)
            return res
        shapes, sizes = known
        outs = [torch.empty(s, dtype=dt) for s, dt in zip(shapes, self._out_dtypes)]
        ptrs = self.plan.merge([x.data_ptr() for x in tensors], [o.data_ptr() for o in outs])
        self.module._launcher([], sizes, ptrs)()
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        ins = ", ".join(p.name for p in self.inputs)
        outs = ", ".join(p.name for p in self.outputs)
        grad = ", backward" if self.backward is not None else ""
        return f"<TorchOp {self.qualname}({ins}) -> ({outs}){grad}>"


@check_keywords
def to_torch(f: Any, name: "str | None" = None, *, allocate_outputs: bool = True,
             backward: Any = None, saved_inputs: "Sequence[int] | None" = None,
             saved_outputs: Sequence[int] = (), grad_inputs: "Sequence[int] | None" = None,
             emulate: bool = False) -> TorchOp:
    """Register the built module ``f`` as the PyTorch operator ``torch.ops.tdsl.<name>``.

    ``name``: the operator's name (default: the kernel's, made unique); ``allocate_outputs``:
    take the inputs and return new outputs (default), or take every argument and write the
    outputs in place; ``backward``: the gradient, a built tdsl module or a ``TorchOp`` (see the
    module docstring for the arguments it takes), or a callable ``(saved_inputs, saved_outputs,
    grad_outputs) -> grads``; ``saved_inputs`` / ``saved_outputs``: positions (among the
    forward inputs / outputs) of the tensors the backward takes, before the output gradients
    (default: every input, no output); ``grad_inputs``: positions of the inputs whose gradients
    the backward kernel writes, in its output order (default: all); ``emulate``: for a CUDA
    module, run it on CPU tensors under the CPU emulation harness (for tests without a GPU).
    """
    _require_torch()
    if not isinstance(getattr(f, "func", None), PrimFunc):
        raise TDSLError(f"to_torch expects a built tdsl module (td.build(...)), got "
                        f"{type(f).__name__}")
    kind = _module_kind(f)
    if emulate and kind != "cuda":
        raise TDSLError("to_torch(emulate=True) is for CUDA modules (the CPU emulation harness)")
    if backward is not None and not allocate_outputs:
        raise TDSLError("to_torch: autograd needs a functional operator; use "
                        "allocate_outputs=True with backward=")
    if name is None:
        name = _unique_name(re.sub(r"\W", "_", f.func.name) or "kernel")
    else:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise TDSLError(f"to_torch: operator name {name!r} must be a Python identifier "
                            f"(it becomes torch.ops.{NAMESPACE}.{name})")
        if f"{NAMESPACE}::{name}" in _REGISTERED:
            raise TDSLError(f"to_torch: torch.ops.{NAMESPACE}.{name} is already registered in "
                            f"this process; choose another name")
    op = TorchOp(f, name, allocate_outputs, emulate)
    op._register()
    if backward is not None:
        op._register_autograd(backward, saved_inputs, saved_outputs, grad_inputs)
    elif allocate_outputs:
        op._register_no_gradient()   # the in-place form returns nothing to differentiate
    return op

"""Scalar expressions: the leaves and operators of the DSL and of the loop IR.

Nodes are immutable.  Each node class lists its child fields in ``_fields`` so
that generic traversals (``tdsl.visitor``) need no per-node code.  Python
operators build nodes (``a + b``) with the dtype rules of ``binary_dtype``:
integer operands of different widths widen implicitly; any other mix of dtypes
is refused, and Python literals take the dtype of the other operand.
"""
from __future__ import annotations

import contextlib
import contextvars
import enum
import numbers
import itertools
from typing import Any, Iterator, Sequence

from .dtype import INDEX, DType, as_dtype
from .errors import DTypeError, ShapeError


_CREATION_SEQ = itertools.count()


def creation_seq() -> int:
    """The next number of one process-wide creation counter (variables, buffers, tensors).

    Orders objects of equal name deterministically (canonical forms, argument lists)
    without looking at memory addresses, which vary between runs and hash seeds.
    """
    return next(_CREATION_SEQ)


class Expr:
    """Base class of scalar expressions."""

    __slots__ = ("dtype",)
    _fields: tuple[str, ...] = ()

    # ---- arithmetic ---------------------------------------------------------------
    def __add__(self, other): return _binary(Add, self, other)
    def __radd__(self, other): return _binary(Add, other, self)
    def __sub__(self, other): return _binary(Sub, self, other)
    def __rsub__(self, other): return _binary(Sub, other, self)
    def __mul__(self, other): return _binary(Mul, self, other)
    def __rmul__(self, other): return _binary(Mul, other, self)
    def __truediv__(self, other): return _div(self, other)
    def __rtruediv__(self, other): return _div(other, self)
    def __floordiv__(self, other): return _binary(FloorDiv, self, other)
    def __rfloordiv__(self, other): return _binary(FloorDiv, other, self)
    def __mod__(self, other): return _binary(FloorMod, self, other)
    def __rmod__(self, other): return _binary(FloorMod, other, self)
    def __pow__(self, other): return call("pow", self, other)
    def __rpow__(self, other): return call("pow", other, self)
    def __neg__(self): return _binary(Sub, const(0, self.dtype), self)
    def __abs__(self): return call("abs", self)

    # ---- comparison and logic ---------------------------------------------------------
    def __lt__(self, other): return _compare(LT, self, other)
    def __le__(self, other): return _compare(LE, self, other)
    def __gt__(self, other): return _compare(GT, self, other)
    def __ge__(self, other): return _compare(GE, self, other)
    def __eq__(self, other): return _compare(EQ, self, other)  # type: ignore[override]
    def __ne__(self, other): return _compare(NE, self, other)  # type: ignore[override]
    def __and__(self, other): return _logical(And, self, other)
    def __rand__(self, other): return _logical(And, other, self)
    def __or__(self, other): return _logical(Or, self, other)
    def __ror__(self, other): return _logical(Or, other, self)
    def __invert__(self): return Not(_as_bool(self))

    def equal(self, other: Any) -> "Expr":
        """``self == other`` as an expression (TVM's ``PrimExpr.equal``)."""
        return _compare(EQ, self, other)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise DTypeError(
            "a tdsl expression has no truth value in Python; use td.if_then_else, "
            "td.all/td.any or &, | instead of 'if', 'and', 'or', 'not'")

    def __index__(self) -> int:
        """An integer expression of constants (``A.shape[1] * 2``) is a Python integer;
        one with symbolic sizes is known only when the kernel runs, so it raises."""
        from .arith.constfold import const_fold
        from .visitor import free_vars
        if isinstance(self, Var):
            unknown = [self]
        else:
            unknown = sorted(free_vars(self), key=lambda v: v.seq)
            folded = const_fold(self) if not unknown else None
            if isinstance(folded, Const):
                return folded.__index__()
        if not unknown:
            raise DTypeError(f"{self!r} does not fold to an integer constant")
        names = ", ".join(f"'{v.name}'" for v in unknown)
        what = f"the symbolic size {names}" if isinstance(self, Var) else \
            f"{self!r} (it depends on the symbolic size(s) {names})"
        raise DTypeError(
            f"{what} has no integer value until the kernel is called with arrays (its value "
            f"comes from their shapes); only constant sizes convert with int() or serve as "
            f"NumPy shapes")

    __int__ = __index__

    def astype(self, dtype: "DType | str") -> "Expr":
        """Cast to ``dtype`` (TVM's ``expr.astype``); an IterVar casts its variable."""
        dtype = as_dtype(dtype)
        e = self.as_expr()
        return e if dtype == e.dtype else Cast(e, dtype)

    def __repr__(self) -> str:
        from .printer import expr_to_str
        return expr_to_str(self)

    def same_as(self, other: object) -> bool:
        return self is other

    def as_expr(self) -> "Expr":
        """The expression this object stands for (an IterVar stands for its variable)."""
        return self


# ---- leaves ---------------------------------------------------------------------------
class Var(Expr):
    """A named scalar variable: a loop variable or a symbolic size. Identity-compared.

    ``seq`` numbers variables in creation order: a deterministic tie-break between
    variables of the same name (canonical forms must not depend on memory addresses,
    or replaying a trace could print terms in another order).
    """

    __slots__ = ("name", "seq")

    def __init__(self, name: str, dtype: "DType | str" = INDEX):
        self.name = name
        self.dtype = as_dtype(dtype)
        self.seq = creation_seq()


class ThreadIndexVar(Var):
    """The variable of a ``td.thread_axis``: names a GPU hardware index (``thread_tag``),
    so that predicates written with it (``set_store_predicate(tx.var.equal(0))``) can be
    resolved to the loop bound to that index."""

    __slots__ = ("thread_tag",)

    def __init__(self, name: str, thread_tag: Any, dtype: "DType | str" = INDEX):
        super().__init__(name, dtype)
        self.thread_tag = thread_tag


class SizeVar(Var):
    """A symbolic dimension: known to be >= 1 (``td.var``)."""

    __slots__ = ()


class Const(Expr):
    """An integer, float or bool immediate."""

    __slots__ = ("value",)

    def __init__(self, value: Any, dtype: "DType | str"):
        dtype = as_dtype(dtype)
        if dtype.is_bool:
            value = bool(value)
        elif dtype.is_int:
            if isinstance(value, float) and not float(value).is_integer():
                raise DTypeError(f"constant {value} is not an integer but dtype is {dtype}")
            value = int(value)
        else:
            value = float(value)
        self.value = value
        self.dtype = dtype

    def __bool__(self) -> bool:  # lets `if const:` work on folded conditions
        return bool(self.value)

    def __index__(self) -> int:
        """An integer constant is a Python integer where one is needed: ``int(T.shape[0])``,
        ``np.empty(T.shape)``, ``range(n)``."""
        if self.dtype.is_int:
            return self.value
        raise DTypeError(f"the {self.dtype} constant {self.value!r} is not an integer; "
                         f"only integer constants convert with int() or serve as sizes")

    __int__ = __index__


# ---- operators ------------------------------------------------------------------------
class Cast(Expr):
    __slots__ = ("value",)
    _fields = ("value",)

    def __init__(self, value: Expr, dtype: "DType | str"):
        self.value = value
        self.dtype = as_dtype(dtype)


class BinaryOp(Expr):
    """``a <op> b`` with operands of one dtype."""

    __slots__ = ("a", "b")
    _fields = ("a", "b")
    symbol = "?"

    def __init__(self, a: Expr, b: Expr):
        self.a = a
        self.b = b
        self.dtype = a.dtype


class Add(BinaryOp): __slots__ = (); symbol = "+"
class Sub(BinaryOp): __slots__ = (); symbol = "-"
class Mul(BinaryOp): __slots__ = (); symbol = "*"
class Div(BinaryOp):
    """True division of floats."""
    __slots__ = (); symbol = "/"
class FloorDiv(BinaryOp):
    """Division rounding toward minus infinity (Python's ``//``)."""
    __slots__ = (); symbol = "//"
class FloorMod(BinaryOp):
    """Remainder with the sign of the divisor (Python's ``%``)."""
    __slots__ = (); symbol = "%"
class Min(BinaryOp): __slots__ = (); symbol = "min"
class Max(BinaryOp): __slots__ = (); symbol = "max"


class CmpOp(BinaryOp):
    """A comparison; the result is bool."""

    __slots__ = ()

    def __init__(self, a: Expr, b: Expr):
        super().__init__(a, b)
        self.dtype = DType.BOOL

    def __bool__(self) -> bool:
        # Lets identity-keyed dict/set lookups and ``a == a`` checks behave.
        if isinstance(self, EQ):
            return self.a is self.b
        if isinstance(self, NE):
            return self.a is not self.b
        return Expr.__bool__(self)


class EQ(CmpOp): __slots__ = (); symbol = "=="
class NE(CmpOp): __slots__ = (); symbol = "!="
class LT(CmpOp): __slots__ = (); symbol = "<"
class LE(CmpOp): __slots__ = (); symbol = "<="
class GT(CmpOp): __slots__ = (); symbol = ">"
class GE(CmpOp): __slots__ = (); symbol = ">="


class And(BinaryOp): __slots__ = (); symbol = "and"
class Or(BinaryOp): __slots__ = (); symbol = "or"


class Not(Expr):
    __slots__ = ("a",)
    _fields = ("a",)

    def __init__(self, a: Expr):
        self.a = a
        self.dtype = DType.BOOL


class Select(Expr):
    """``true_value if cond else false_value``, evaluating only the chosen branch.

    This is TVM's ``if_then_else``: a guarded load in the untaken branch is never
    executed, which is what makes padding with it safe.
    """

    __slots__ = ("cond", "true_value", "false_value")
    _fields = ("cond", "true_value", "false_value")

    def __init__(self, cond: Expr, true_value: Expr, false_value: Expr):
        if not cond.dtype.is_bool:
            raise DTypeError(f"if_then_else: the condition has dtype {cond.dtype}, not bool; "
                             f"compare it first (e.g. x != 0)")
        if true_value.dtype != false_value.dtype:
            raise DTypeError(f"if_then_else: branches have dtypes {true_value.dtype} and "
                             f"{false_value.dtype}; cast one of them")
        self.cond = cond
        self.true_value = true_value
        self.false_value = false_value
        self.dtype = true_value.dtype


class Intrinsic(str, enum.Enum):
    """Math functions known to every backend."""

    EXP = "exp"; EXP2 = "exp2"; LOG = "log"; LOG2 = "log2"; LOG10 = "log10"
    SQRT = "sqrt"; RSQRT = "rsqrt"; TANH = "tanh"; SIGMOID = "sigmoid"; ERF = "erf"
    ABS = "abs"; FLOOR = "floor"; CEIL = "ceil"; ROUND = "round"; TRUNC = "trunc"
    POW = "pow"; SIN = "sin"; COS = "cos"; ISNAN = "isnan"
    # integer bit operations (tdsl.bitwise): two's complement, shifts by 0..bits-1
    BITWISE_AND = "bitwise_and"; BITWISE_OR = "bitwise_or"; BITWISE_XOR = "bitwise_xor"
    BITWISE_NOT = "bitwise_not"; SHIFT_LEFT = "shift_left"; SHIFT_RIGHT = "shift_right"

    def __str__(self) -> str:
        return self.value


_FLOAT_ONLY = {
    Intrinsic.EXP, Intrinsic.EXP2, Intrinsic.LOG, Intrinsic.LOG2, Intrinsic.LOG10,
    Intrinsic.SQRT, Intrinsic.RSQRT, Intrinsic.TANH, Intrinsic.SIGMOID, Intrinsic.ERF,
    Intrinsic.FLOOR, Intrinsic.CEIL, Intrinsic.ROUND, Intrinsic.TRUNC, Intrinsic.POW,
    Intrinsic.SIN, Intrinsic.COS, Intrinsic.ISNAN,
}
#: intrinsics defined on integers only
BIT_OPS = frozenset({
    Intrinsic.BITWISE_AND, Intrinsic.BITWISE_OR, Intrinsic.BITWISE_XOR, Intrinsic.BITWISE_NOT,
    Intrinsic.SHIFT_LEFT, Intrinsic.SHIFT_RIGHT,
})


class Call(Expr):
    """A math intrinsic applied to arguments of one dtype."""

    __slots__ = ("func", "args")
    _fields = ("args",)

    def __init__(self, func: Intrinsic, args: Sequence[Expr], dtype: "DType | str"):
        self.func = Intrinsic(func)
        self.args = tuple(args)
        self.dtype = as_dtype(dtype)


class TensorLoad(Expr):
    """``tensor[indices]`` in a compute declaration (TVM's ProducerLoad)."""

    __slots__ = ("tensor", "indices")
    _fields = ("indices",)

    def __init__(self, tensor: Any, indices: Sequence[Expr]):
        self.tensor = tensor
        self.indices = tuple(indices)
        self.dtype = tensor.dtype


class BufferLoad(Expr):
    """``buffer[indices]`` in lowered IR."""

    __slots__ = ("buffer", "indices")
    _fields = ("indices",)

    def __init__(self, buffer: Any, indices: Sequence[Expr]):
        self.buffer = buffer
        self.indices = tuple(indices)
        self.dtype = buffer.dtype


class Reduce(Expr):
    """A commutative reduction over ``axis``.

    A ``ComputeOp`` holds reductions only at the top of its body; ``td.compute`` moves
    reductions used inside larger expressions into stages of their own.

    ``source`` holds one expression per reduced value (two for argmax-style
    reducers); this node is the ``value_index``-th result.
    """

    __slots__ = ("combiner", "source", "axis", "condition", "value_index", "init")
    _fields = ("source", "condition", "init")

    def __init__(self, combiner: Any, source: Sequence[Expr], axis: Sequence[Any],
                 condition: Expr, value_index: int, init: Sequence[Expr] = ()):
        self.combiner = combiner
        self.source = tuple(source)
        self.axis = tuple(axis)
        self.condition = condition
        self.value_index = value_index
        self.init = tuple(init)
        self.dtype = self.source[value_index].dtype


# ---- construction helpers -----------------------------------------------------------------
def const(value: Any, dtype: "DType | str | None" = None) -> Const:
    """An immediate; the dtype defaults to bool, int32 or float32 from the value."""
    if dtype is None:
        if isinstance(value, (bool,)):
            dtype = DType.BOOL
        elif isinstance(value, numbers.Integral):
            dtype = DType.INT32
        elif isinstance(value, numbers.Real):
            dtype = DType.FLOAT32
        else:
            raise DTypeError(f"cannot make a constant from {value!r}")
    return Const(value, dtype)


def convert(value: Any, like: "DType | None" = None) -> Expr:
    """Turn a Python number into a constant (of dtype ``like`` when lossless)."""
    if isinstance(value, Expr):
        return value.as_expr()
    if hasattr(value, "incomplete_index"):     # A[i] of a 2-d tensor (tensor.TensorSlice)
        raise value.incomplete_index()
    if hasattr(value, "op") and hasattr(value, "shape") and hasattr(value, "ndim"):
        if value.ndim == 0:
            return value()
        raise ShapeError(f"tensor '{value.name}' used as a scalar; index it, e.g. {value.name}[i]")
    if isinstance(value, bool):
        return Const(value, DType.BOOL)
    if isinstance(value, numbers.Integral):
        return Const(int(value), like if like is not None and not like.is_bool else INDEX)
    if isinstance(value, numbers.Real):
        if like is not None and like.is_float:
            return Const(float(value), like)
        if like is not None:
            raise DTypeError(
                f"float literal {value} used with an expression of dtype {like}; "
                f"cast one side with .astype(...)")
        return Const(float(value), DType.FLOAT32)
    raise DTypeError(f"cannot use {type(value).__name__} {value!r} in a tdsl expression")


#: True inside ``int_to_float_promotion()``: an integer operand of a float operation is
#: cast to the float's dtype (TVM's rule) instead of refused.  A context variable, so it
#: holds for one thread or task only.
_INT_TO_FLOAT: contextvars.ContextVar[bool] = contextvars.ContextVar("tdsl_int_to_float",
                                                                    default=False)


@contextlib.contextmanager
def int_to_float_promotion() -> Iterator[None]:
    """Within the block, ``float_expr * int_expr`` (and ``int_expr * 1.5``) casts the
    integer side to the float dtype, as TVM does.  ``tdsl.compat.tvm``'s ``te.compute``
    declares bodies in it; tdsl's own ``compute`` refuses mixed dtypes (an implicit cast
    is a common source of wrong answers)."""
    token = _INT_TO_FLOAT.set(True)
    try:
        yield
    finally:
        _INT_TO_FLOAT.reset(token)


def binary_dtype(op: str, a: DType, b: DType) -> DType:
    """The dtype of ``a <op> b``: equal dtypes, or two integers (the wider wins); under
    ``int_to_float_promotion`` also an integer and a float (the float)."""
    if a == b:
        return a
    if a.is_int and b.is_int:
        return a if (a.bits, a.is_signed) >= (b.bits, b.is_signed) else b
    if _INT_TO_FLOAT.get():
        if a.is_float and b.is_int:
            return a
        if b.is_float and a.is_int:
            return b
    raise DTypeError(
        f"operator '{op}' mixes dtypes {a} and {b}; cast one side with .astype(...)")


def _operands(op: str, a: Any, b: Any) -> tuple[Expr, Expr]:
    if _INT_TO_FLOAT.get():     # TVM: a float literal next to an integer is a float32
        a, b = (Const(float(x), DType.FLOAT32) if _float_literal(x) and isinstance(y, Expr)
                and y.dtype.is_int else x for x, y in ((a, b), (b, a)))
    if not isinstance(a, Expr):
        b = convert(b)
        a = convert(a, b.dtype)
    elif not isinstance(b, Expr):
        b = convert(b, a.dtype)
    a, b = convert(a), convert(b)
    dtype = binary_dtype(op, a.dtype, b.dtype)
    return a.astype(dtype), b.astype(dtype)


def _float_literal(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral)


def _binary(cls: type, a: Any, b: Any) -> Expr:
    a, b = _operands(cls.symbol, a, b)
    if a.dtype.is_bool:
        raise DTypeError(f"operator '{cls.symbol}' applied to bool; cast to an integer first")
    return cls(a, b)


def _div(a: Any, b: Any) -> Expr:
    a, b = _operands("/", a, b)
    if not a.dtype.is_float:
        raise DTypeError(
            f"'/' on {a.dtype} operands; use '//' (floor division) for integers "
            f"or cast to a float dtype first")
    return Div(a, b)


def _compare(cls: type, a: Any, b: Any) -> Expr:
    a, b = _operands(cls.symbol, a, b)
    return cls(a, b)


def _as_bool(a: Any) -> Expr:
    a = convert(a)
    if not a.dtype.is_bool:
        raise DTypeError(f"logical operator applied to {a.dtype}; compare it first (e.g. x != 0)")
    return a


def _logical(cls: type, a: Any, b: Any) -> Expr:
    return cls(_as_bool(a), _as_bool(b))


def call(name: "str | Intrinsic", *args: Any) -> Call:
    """Apply a math intrinsic; every argument must share one dtype."""
    func = Intrinsic(name)
    exprs = [a for a in args if isinstance(a, Expr)]
    if not exprs:
        raise DTypeError(f"{func}: needs at least one tdsl expression argument")
    like = exprs[0].dtype
    conv = [convert(a, like) for a in args]
    for c in conv:
        if c.dtype != like:
            raise DTypeError(f"{func}: arguments mix dtypes {like} and {c.dtype}; cast first")
    if func in _FLOAT_ONLY and not like.is_float:
        raise DTypeError(f"{func}: needs a float argument, got {like}; cast with .astype('float32')")
    if func in BIT_OPS and not like.is_int:
        raise DTypeError(f"{func}: needs integer arguments, got {like}")
    dtype = DType.BOOL if func is Intrinsic.ISNAN else like
    return Call(func, conv, dtype)


def is_const_int(e: Any, value: "int | None" = None) -> bool:
    """True if ``e`` is an integer constant (equal to ``value`` when given)."""
    if isinstance(e, Const) and e.dtype.is_int:
        return value is None or e.value == value
    return False

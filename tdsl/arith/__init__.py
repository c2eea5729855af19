"""Integer arithmetic analysis for lowering: simplification with variable bounds.

``Analyzer`` canonicalizes index expressions (sums of coefficient x term), folds
floor division/modulo, min/max and comparisons using known variable ranges, and
computes constant and symbolic bounds.  ``to_sympy``/``from_sympy`` bridge to SymPy
for symbolic shape reasoning (too slow for lowering itself).
"""
from .analyzer import Analyzer, simplify
from .constfold import const_fold
from .interval import Interval


def to_sympy(*args, **kwargs):
    """``sympy_bridge.to_sympy`` (imported on first use: SymPy takes ~0.3 s to import)."""
    from .sympy_bridge import to_sympy as f
    return f(*args, **kwargs)


def from_sympy(*args, **kwargs):
    """``sympy_bridge.from_sympy`` (imported on first use)."""
    from .sympy_bridge import from_sympy as f
    return f(*args, **kwargs)

__all__ = ["Analyzer", "Interval", "simplify", "const_fold", "to_sympy", "from_sympy"]

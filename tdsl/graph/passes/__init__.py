"""Graph passes: constant folding, batch-norm folding, dead code, common subexpressions,
decompositions (attention), horizontal merging of GEMMs that share an input, pointwise
convolutions as GEMMs, layout choice (NHWC convolution regions, ``layout``), and fusion
into kernels (``fusion.fuse``).

``optimize(graph)`` runs them in order on a copy and returns it with what each did.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph
from .cleanup import ConstDigests, eliminate_common_subexpressions, eliminate_dead_code
from .decompose import decompose
from .flatten import flatten_anchors, merge_reshapes, sink_reshapes
from .fold import fold_batch_norm, fold_constants
from .fusion import Alias, Fallback, Group, fuse
from .horizontal import merge_parallel_gemms
from .layout import DEFAULT_LAYOUT, convert_layout
from .pointwise import pointwise_as_gemm
from .prepack import prepack_weights
from .recompute import recompute_cheap
from .rewrite import clone

__all__ = ["optimize", "PassStats", "fold_constants", "fold_batch_norm", "eliminate_dead_code",
           "eliminate_common_subexpressions", "decompose", "fuse", "Group", "Alias",
           "Fallback", "clone", "merge_parallel_gemms", "convert_layout"]


@dataclass
class PassStats:
    """What the passes changed (printed in the compile report)."""

    folded_constants: int = 0
    folded_batch_norms: int = 0
    merged_common: int = 0
    removed_dead: int = 0
    decomposed: int = 0
    flattened: int = 0
    sunk_reshapes: int = 0
    recomputed: int = 0
    prepacked: int = 0
    merged_gemms: int = 0
    pointwise_gemms: int = 0
    #: ``passes.layout``: convolutions made NHWC, regions converted / left NCHW (they did
    #: not pay), elementwise ops the transposes sank below, transposes cancelled or merged
    nhwc_convs: int = 0
    nhwc_regions: int = 0
    nchw_regions_kept: int = 0
    sunk_transposes: int = 0
    cancelled_transposes: int = 0


def optimize(graph: Graph, layout: str = DEFAULT_LAYOUT) -> tuple[Graph, PassStats]:
    """A rewritten copy of ``graph`` (the input is left unchanged) and the pass statistics.
    ``layout``: the convolutions' data layout, "auto" (NHWC regions where the rule of
    ``passes.layout`` says they pay), "NCHW" (PyTorch's, unchanged) or "NHWC" (every
    convolution that can)."""
    g = clone(graph)
    g.verify()
    st = PassStats()
    digest = ConstDigests()      # each weight's checksum once, for the three CSE passes
    st.removed_dead += eliminate_dead_code(g)
    st.decomposed += decompose(g)
    st.folded_constants += fold_constants(g)
    st.merged_common += eliminate_common_subexpressions(g, digest)
    st.folded_batch_norms += fold_batch_norm(g)
    st.folded_constants += fold_constants(g)
    st.merged_common += eliminate_common_subexpressions(g, digest)
    st.merged_gemms += merge_parallel_gemms(g)     # constant weights, before pre-packing
    st.pointwise_gemms += pointwise_as_gemm(g)    # after BN folding, before HWIO pre-packing
    lst = convert_layout(g, layout)               # 1x1 GEMMs are no longer convolutions
    st.nhwc_convs, st.nhwc_regions, st.nchw_regions_kept = (
        lst.nhwc_convs, lst.regions, lst.regions_kept)
    st.sunk_transposes, st.cancelled_transposes = lst.sunk, lst.cancelled
    st.prepacked += prepack_weights(g)
    st.flattened += flatten_anchors(g)
    st.sunk_reshapes += sink_reshapes(g)
    merge_reshapes(g)
    st.folded_constants += fold_constants(g)
    st.merged_common += eliminate_common_subexpressions(g, digest)
    st.removed_dead += eliminate_dead_code(g)
    st.recomputed += recompute_cheap(g)
    g.verify()
    return g, st

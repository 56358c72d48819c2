"""Shared GNN plumbing: input checks for PyG ``Data``, the GCN operator, a weight-shared GCN stack,
an operator cache and gradient reversal. Private to eff-graph (``imgda`` and ``da`` use it)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

__all__ = [
    "GCNStack",
    "GradReverse",
    "GraphOperator",
    "OperatorCache",
    "check_domain_pair",
    "check_edge_index",
    "check_graph",
    "gcn_operator",
    "grad_reverse",
    "make_operator",
    "propagate",
]


class GraphOperator(NamedTuple):
    """A propagation operator as ``(edge_index, edge_weight)`` (message ``j → i`` for the entry
    ``(j, i)``, PyG's convention) and as sparse CSR matrices: ``adj_t`` (row i aggregates the messages
    into node i) and its transpose ``adj`` for the backward pass."""

    edge_index: Tensor
    edge_weight: Tensor
    adj_t: Tensor
    adj: Tensor


def make_operator(edge_index: Tensor, edge_weight: Tensor, num_nodes: int) -> GraphOperator:
    shape = (num_nodes, num_nodes)

    def csr(index: Tensor) -> Tensor:
        coo = torch.sparse_coo_tensor(index, edge_weight, shape, check_invariants=True).coalesce()
        with warnings.catch_warnings():  # torch's notice that CSR support is "beta"
            warnings.filterwarnings(
                "ignore", message="Sparse CSR tensor support", category=UserWarning
            )
            return coo.to_sparse_csr()

    return GraphOperator(edge_index, edge_weight, csr(edge_index.flip(0)), csr(edge_index))


class _Propagate(torch.autograd.Function):
    """``adj_t @ x`` whose backward uses the cached transpose (PyTorch's own CSR backward transposes
    on every call; measured 5x slower for these graphs)."""

    @staticmethod
    def forward(ctx: Any, adj_t: Tensor, adj: Tensor, x: Tensor) -> Tensor:
        ctx.adj = adj
        return adj_t @ x

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[None, None, Tensor]:
        return None, None, ctx.adj @ grad


def propagate(op: GraphOperator, x: Tensor) -> Tensor:
    """Aggregate ``out_i = Σ_j w_ji x_j`` over the operator's entries ``(j, i)``."""
    return _Propagate.apply(op.adj_t, op.adj, x)


def check_edge_index(edge_index: Any, num_nodes: int, name: str = "edge_index") -> None:
    """``ValueError``/``TypeError`` unless ``edge_index`` is a (2, E) integer tensor of valid node ids."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape (2, num_edges), got {tuple(edge_index.shape)}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer node ids, got dtype {edge_index.dtype}")
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{name} refers to node {bad}, outside [0, {num_nodes})")


def check_graph(data: Any, name: str, num_classes: int | None = None, need_y: bool = False) -> None:
    """Validate a PyG ``Data`` used by the domain-adaptation models: features, edges, labels."""
    if not isinstance(data, Data):
        raise TypeError(f"{name} must be a torch_geometric.data.Data, got {type(data).__name__}")
    x = data.x
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"{name}.x must be a 2-D floating-point tensor (num_nodes, num_features)")
    if not bool(torch.isfinite(x).all()):
        # A NaN feature spreads through message passing and training ends at chance, silently.
        bad = int((~torch.isfinite(x)).any(1).sum())
        raise ValueError(f"{name}.x holds NaN or inf values (in {bad} nodes); clean or impute them")
    if data.edge_index is None:
        raise ValueError(f"{name}.edge_index is missing")
    check_edge_index(data.edge_index, x.size(0), f"{name}.edge_index")
    if need_y:
        y = data.y
        if not isinstance(y, Tensor) or y.dim() != 1 or y.size(0) != x.size(0):
            raise ValueError(f"{name}.y must be a 1-D label tensor with one label per node")
        if y.is_floating_point():
            raise TypeError(f"{name}.y must hold integer class labels, got dtype {y.dtype}")
        if (
            num_classes is not None
            and y.numel()
            and (int(y.min()) < 0 or int(y.max()) >= num_classes)
        ):
            raise ValueError(
                f"{name}.y has labels outside [0, {num_classes}): min {int(y.min())}, max {int(y.max())}"
            )


def check_domain_pair(source: Any, target: Any, num_classes: int) -> None:
    """Source needs labels in [0, C); target labels are never read; feature dimensions must match."""
    check_graph(source, "source", num_classes, need_y=True)
    check_graph(target, "target")
    if source.x.size(1) != target.x.size(1):
        raise ValueError(
            f"source and target feature dimensions differ: {source.x.size(1)} vs {target.x.size(1)}"
        )
    counts = torch.bincount(source.y, minlength=num_classes)
    empty = [c for c in range(num_classes) if int(counts[c]) == 0]
    if empty:
        raise ValueError(
            f"source class {empty[0]} has no nodes; every class in [0, {num_classes}) needs labelled source nodes"
        )


def gcn_operator(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """The local (GCN) operator ``Â = D^{-1/2}(A + I)D^{-1/2}`` as ``(edge_index, edge_weight)``."""
    ei, ew = gcn_norm(edge_index, None, num_nodes, add_self_loops=True)
    return ei, ew


class OperatorCache:
    """Cache of graph operators keyed by the graph (same ``edge_index`` tensor, or an equal one)."""

    def __init__(
        self, build: Callable[[Tensor, int], tuple[Tensor, Tensor]], size: int = 8
    ) -> None:
        self.build = build
        self.size = size
        self._entries: list[tuple[Tensor, int, GraphOperator]] = []

    def __call__(self, edge_index: Tensor, num_nodes: int) -> GraphOperator:
        for ref, n, op in self._entries:
            if n == num_nodes and (
                ref is edge_index
                or (
                    ref.shape == edge_index.shape
                    and ref.device == edge_index.device
                    and torch.equal(ref, edge_index)
                )
            ):
                return op
        op = make_operator(*self.build(edge_index, num_nodes), num_nodes)
        self._entries.append((edge_index, num_nodes, op))
        if len(self._entries) > self.size:
            self._entries.pop(0)
        return op


class GCNStack(nn.Module):
    """``num_layers`` GCN layers on a precomputed operator, ReLU + dropout between: each layer is a PyG
    ``GCNConv(normalize=False)`` (its weight and bias; the propagation runs through :func:`propagate`,
    numerically what ``GCNConv.forward(x, adj_t)`` computes, with a faster backward).

    One weight set; the caller chooses the propagation operator, so the same stack serves both
    branches of a dual-branch encoder. ``offsets`` (one tensor per layer) are added after each layer
    (ImGDA's source compensation)."""

    def __init__(
        self, in_channels: int, hidden_channels: int, num_layers: int = 2, dropout: float = 0.1
    ) -> None:
        super().__init__()
        dims = [in_channels] + [hidden_channels] * num_layers
        self.convs = nn.ModuleList(
            GCNConv(dims[i], dims[i + 1], normalize=False, add_self_loops=False)
            for i in range(num_layers)
        )
        self.dropout = dropout

    def forward(
        self, x: Tensor, op: GraphOperator, offsets: Sequence[Tensor] | None = None
    ) -> Tensor:
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            x = propagate(op, conv.lin(x))
            if conv.bias is not None:
                x = x + conv.bias
            if offsets is not None:
                x = x + offsets[i]
            if i < last:
                x = F.dropout(F.relu(x), p=self.dropout, training=self.training)
        return x


class GradReverse(torch.autograd.Function):
    """Identity forward, gradient multiplied by ``-weight`` backward (DANN's gradient reversal)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: float) -> Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return -ctx.weight * grad, None


def grad_reverse(x: Tensor, weight: float) -> Tensor:
    return GradReverse.apply(x, weight)

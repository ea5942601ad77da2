"""The torch.distributed backend "trnccl" and the TokenSwitch MoE object.

Importing this module registers the backend::

    import torch.distributed as dist
    import trnccl.torch  # noqa: F401
    dist.init_process_group("trnccl", init_method="env://")

Ranks meet through the c10d store that init_process_group passes: rank 0 creates a trnccl
unique id and publishes it in the store, the others read it. No MPI is needed. A subgroup
(new_group) of a trnccl job is a trncclCommSplit of the default group. Tensors must be CPU
tensors.
"""

import datetime
import functools
import inspect
import threading

import torch
import torch.distributed as dist

from . import _C

BACKEND_NAME = "trnccl"
_UNIQUE_ID_KEY = "trnccl_unique_id"


def _timeout_ms(timeout):
    if isinstance(timeout, datetime.timedelta):
        return datetime.timedelta(milliseconds=max(1, int(timeout.total_seconds() * 1000)))
    return datetime.timedelta(milliseconds=int(timeout))


# A subgroup split from the default trnccl group, waiting for torch to call the creator (a
# member) -- see _split_subgroups below.
_pending_split = threading.local()


def _create_process_group(options, pg_options=None):
    """torch's backend creator (extended API): the communicator split for this subgroup, or
    a new one through the store's rendezvous (the default group, and subgroups of a job
    whose default group is not trnccl)."""
    split = getattr(_pending_split, "pg", None)
    if split is not None:
        _pending_split.pg = None
        if split.rank() == options.group_rank and split.size() == options.group_size:
            return split
    store = options.store
    rank = options.group_rank
    size = options.group_size
    name = "torch:" + str(getattr(options, "group_id", "") or "default")
    if rank == 0:
        store.set(_UNIQUE_ID_KEY, _C.unique_id())
        unique_id = store.get(_UNIQUE_ID_KEY)
    else:
        unique_id = store.get(_UNIQUE_ID_KEY)  # waits up to the store's timeout
    return _C.ProcessGroupTrnccl(unique_id, rank, size, _timeout_ms(options.timeout), name)


def _default_trnccl_group():
    if not dist.is_initialized():
        return None
    pg = dist.distributed_c10d._get_default_group()
    return pg if isinstance(pg, _C.ProcessGroupTrnccl) else None


def _split_subgroups(helper):
    """Wraps torch's _new_process_group_helper so that a trnccl subgroup of a trnccl job is a
    trncclCommSplit of the default group. torch calls the helper on every rank (new_group
    requires all ranks to enter it) but the backend's creator on members only, and a split
    needs every rank of the parent: so the split happens here, on every rank, and the creator
    picks up the member's result."""
    signature = inspect.signature(helper)

    @functools.wraps(helper)
    def wrapped(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return helper(*args, **kwargs)
        ranks = bound.arguments.get("global_ranks_in_group") or []
        backend = str(bound.arguments.get("backend", "")).lower()
        world = _default_trnccl_group()
        if ranks and backend == BACKEND_NAME and world is not None:
            me = world.rank()
            member = me in ranks
            timeout = bound.arguments.get("timeout", datetime.timedelta(minutes=30))
            name = "torch:split" + "-".join(str(r) for r in ranks[:8])
            _pending_split.pg = _C.ProcessGroupTrnccl.split(
                world, 0 if member else -1, sorted(ranks).index(me) if member else 0,
                _timeout_ms(timeout), name)
        try:
            return helper(*args, **kwargs)
        finally:
            _pending_split.pg = None

    wrapped._trnccl_split = True
    return wrapped


def _register():
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True)
    c10d = dist.distributed_c10d
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is not None and not getattr(helper, "_trnccl_split", False):
        c10d._new_process_group_helper = _split_subgroups(helper)


_register()

ProcessGroupTrnccl = _C.ProcessGroupTrnccl


def last_error(group=None):
    """trnccl's last error sentence on a trnccl process group (the default group if None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg.last_error()


# ---- TokenSwitch: MoE dispatch and combine (PyTorch's torch.distributed._token_switch) ----

_LAYOUTS = ("flat", "expert_major")


class Routing:
    """Where every token goes, fixed for every dispatch and combine that uses it.

    Made by TokenSwitch.create_routing (a collective). ``num_recv_tokens`` is the number of
    rows (flat) or slots (expert_major) this rank receives and ``per_expert_token_counts`` the
    (token, local expert) pairs per local expert; in the low-latency mode both are known once
    a dispatch with the routing has run.
    """

    __slots__ = ("_switch", "_handles", "_topk_idx", "layout", "num_tokens", "topk",
                 "_last_weights", "__weakref__")

    def __init__(self, switch, handle, topk_idx, layout):
        self._switch = switch
        self._handles = {switch._dtype: handle}
        self._topk_idx = topk_idx
        self.layout = layout
        self.num_tokens = topk_idx.shape[0]
        self.topk = topk_idx.shape[1]
        self._last_weights = None

    def __setattr__(self, name, value):
        if name in ("layout", "num_tokens", "topk") and hasattr(self, name):
            raise AttributeError(f"Routing is frozen: {name} cannot change")
        object.__setattr__(self, name, value)

    def _handle(self, dtype):
        # The engine fixes one payload dtype per expert-parallel group: a dispatch in another
        # dtype uses that dtype's group and, the first time, makes the same routing there
        # (one more collective exchange of the ids; every rank does it at the same call).
        handle = self._handles.get(dtype)
        if handle is None:
            handle = _C.EpRouting(self._switch._group_for(dtype), self._topk_idx, self.layout)
            self._handles[dtype] = handle
        return handle

    def _counts(self):
        return next(iter(self._handles.values())).counts()

    @property
    def num_recv_tokens(self):
        return self._counts()[0]

    @property
    def per_expert_token_counts(self):
        return self._counts()[1]


class TokenSwitch:
    """Expert-parallel dispatch and combine over a trnccl process group.

    Rank r owns global experts [r*L, (r+1)*L), L = num_experts / group size. ``dtype`` (a
    trnccl extension) is the token dtype dispatched most; others work too (see Routing).
    ``mode``: "normal" (default: counts known at create_routing, as the contract says),
    "low_latency" (no count exchange, for decode-sized batches), "hierarchical" (multi-node)
    or "auto". See docs/TORCH.md and docs/MOE.md.
    """

    def __init__(self, group, num_experts, max_dispatch_tokens_per_rank,
                 max_recv_tokens_per_rank, max_token_bytes, *, dtype=torch.bfloat16,
                 mode="normal"):
        if group is None:
            group = dist.distributed_c10d._get_default_group()
        if not isinstance(group, _C.ProcessGroupTrnccl):
            raise TypeError("TokenSwitch needs a process group of the 'trnccl' backend "
                            f"(got {type(group).__name__}); "
                            "init_process_group('trnccl') or new_group(backend='trnccl')")
        self._pg = group
        self._config = (int(num_experts), int(max_dispatch_tokens_per_rank),
                        int(max_recv_tokens_per_rank), int(max_token_bytes))
        self._mode = mode
        self._dtype = dtype
        self._groups = {}
        self._group_for(dtype)
        self.num_experts = int(num_experts)
        self.num_local_experts = self.num_experts // group.size()

    def _group_for(self, dtype):
        group = self._groups.get(dtype)
        if group is None:
            group = _C.EpGroup(self._pg, *self._config, str(dtype).replace("torch.", ""),
                               self._mode)
            self._groups[dtype] = group
        return group

    def create_routing(self, topk_idx, per_expert_token_counts=None, *, layout="flat"):
        if layout not in _LAYOUTS:
            raise ValueError(f"TokenSwitch.create_routing: layout {layout!r} is not 'flat' or "
                             "'expert_major'")
        if not isinstance(topk_idx, torch.Tensor) or topk_idx.dim() != 2:
            raise ValueError("TokenSwitch.create_routing: topk_idx must be a [num_tokens, top_k] "
                             "int64 or int32 tensor")
        if per_expert_token_counts is not None:
            if (per_expert_token_counts.dtype != torch.int32
                    or per_expert_token_counts.numel() < self.num_local_experts):
                raise ValueError("TokenSwitch.create_routing: per_expert_token_counts must be an "
                                 f"int32 tensor of at least {self.num_local_experts} entries")
        handle = _C.EpRouting(self._group_for(self._dtype), topk_idx, layout)
        routing = Routing(self, handle, topk_idx.contiguous(), layout)
        if per_expert_token_counts is not None:
            per_expert_token_counts[:self.num_local_experts].copy_(handle.counts()[1])
        return routing

    # -- without autograd --
    def _dispatch_into(self, routing, tokens, topk_weights, out_tokens, out_weights, out_idx):
        tokens = tokens.contiguous()
        weights = None if topk_weights is None else topk_weights.to(torch.float32).contiguous()
        routing._handle(tokens.dtype).dispatch(tokens, weights, out_tokens, out_weights, out_idx)
        routing._last_weights = weights

    def _dispatch_new(self, routing, tokens, topk_weights, max_recv):
        flat = routing.layout == "flat"
        hidden = tokens.shape[1]
        out_tokens = torch.empty(max_recv, hidden, dtype=tokens.dtype)
        out_weights = torch.empty((max_recv, routing.topk) if flat else (max_recv,))
        out_idx = torch.empty(max_recv, routing.topk, dtype=torch.int64) if flat else None
        self._dispatch_into(routing, tokens, topk_weights, out_tokens, out_weights, out_idx)
        # Rows past the received count are unspecified by the contract; zeroing them keeps
        # gradients and numerical checks free of stale memory.
        received = routing.num_recv_tokens
        out_tokens[received:].zero_()
        out_weights[received:].zero_()
        if out_idx is not None:
            out_idx[received:].fill_(-1)
        return out_tokens, out_weights, out_idx

    def _combine_new(self, routing, expert_tokens, weighted):
        out = torch.empty(routing.num_tokens, expert_tokens.shape[1], dtype=expert_tokens.dtype)
        routing._handle(expert_tokens.dtype).combine(expert_tokens.contiguous(), out, weighted)
        return out

    # -- the interface --
    def dispatch(self, routing, tokens, topk_weights, max_recv_tokens=None, *, out=None):
        """-> (out_tokens, out_topk_weights, out_topk_idx); out_topk_idx is None in the
        expert_major layout. With out=(tokens, weights, idx) writes there (no autograd)."""
        self._check_routing(routing, "dispatch")
        if out is not None:
            out_tokens, out_weights, out_idx = out
            self._dispatch_into(routing, tokens, topk_weights, out_tokens, out_weights, out_idx)
            return out_tokens, out_weights, out_idx
        if max_recv_tokens is None:
            raise ValueError("TokenSwitch.dispatch: max_recv_tokens is required without out= "
                             "(the rows the output holds)")
        if torch.is_grad_enabled() and tokens.requires_grad:
            return _Dispatch.apply(tokens, topk_weights, self, routing, int(max_recv_tokens))
        return self._dispatch_new(routing, tokens, topk_weights, int(max_recv_tokens))

    def combine(self, routing, expert_tokens, *, out=None, weighted=False):
        """-> [num_tokens, hidden]: per token, the unweighted sum of its rows or slots
        (weighted=True, expert_major only, a trnccl extension: each slot times its dispatch
        weight)."""
        self._check_routing(routing, "combine")
        if out is not None:
            routing._handle(expert_tokens.dtype).combine(expert_tokens.contiguous(), out,
                                                         weighted)
            return out
        if torch.is_grad_enabled() and expert_tokens.requires_grad:
            return _Combine.apply(expert_tokens, self, routing, weighted)
        return self._combine_new(routing, expert_tokens, weighted)

    def _check_routing(self, routing, call):
        if not isinstance(routing, Routing) or routing._switch is not self:
            raise ValueError(f"TokenSwitch.{call}: the routing was not made by this TokenSwitch")


class _Dispatch(torch.autograd.Function):
    """Backward of dispatch: combine of the gradient (each token's rows summed back)."""

    @staticmethod
    def forward(ctx, tokens, topk_weights, switch, routing, max_recv):
        out_tokens, out_weights, out_idx = switch._dispatch_new(routing, tokens, topk_weights,
                                                                max_recv)
        ctx.switch, ctx.routing = switch, routing
        # one call: each call replaces the previous call's set
        ctx.mark_non_differentiable(*[t for t in (out_weights, out_idx) if t is not None])
        return out_tokens, out_weights, out_idx

    @staticmethod
    def backward(ctx, grad_tokens, _grad_weights, _grad_idx):
        if grad_tokens is None:
            return None, None, None, None, None
        grad = ctx.switch._combine_new(ctx.routing, grad_tokens.contiguous(), False)
        return grad, None, None, None, None


class _Combine(torch.autograd.Function):
    """Backward of combine: dispatch of the gradient (each row gets its token's gradient;
    weighted, times its slot's weight); rows past the received count get zero."""

    @staticmethod
    def forward(ctx, expert_tokens, switch, routing, weighted):
        ctx.switch, ctx.routing, ctx.weighted = switch, routing, weighted
        ctx.rows = expert_tokens.shape[0]
        ctx.slot_weights = routing._last_weights if weighted else None
        return switch._combine_new(routing, expert_tokens, weighted)

    @staticmethod
    def backward(ctx, grad_out):
        rows, weights, _ = ctx.switch._dispatch_new(ctx.routing, grad_out.contiguous(),
                                                    ctx.slot_weights, ctx.rows)
        if ctx.weighted:
            rows = rows * weights.to(rows.dtype).unsqueeze(1)
        return rows, None, None, None

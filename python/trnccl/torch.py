"""The torch.distributed backend "trnccl" and the TokenSwitch MoE object.

Importing this module registers the backend::

    import torch.distributed as dist
    import trnccl.torch  # noqa: F401
    dist.init_process_group("trnccl", init_method="env://")

Ranks meet through the c10d store that init_process_group (or new_group) passes: rank 0 of
the group creates a trnccl unique id and publishes it in the store, the others read it. No MPI
is needed. Tensors must be CPU tensors.
"""

import datetime
import os

import torch
import torch.distributed as dist

from . import _C

BACKEND_NAME = "trnccl"
_UNIQUE_ID_KEY = "trnccl_unique_id"


def _timeout_ms(timeout):
    if isinstance(timeout, datetime.timedelta):
        return datetime.timedelta(milliseconds=max(1, int(timeout.total_seconds() * 1000)))
    return datetime.timedelta(milliseconds=int(timeout))


def _create_process_group(options, pg_options=None):
    """torch's backend creator (extended API): store rendezvous, then a trnccl communicator.

    A subgroup (dist.new_group) gets its own communicator among its members: torch 1.13 calls
    the creator on members only, so trnccl's collective split (which needs every rank of the
    parent) cannot be used here; the store rendezvous costs one init per subgroup instead.
    """
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


def _register():
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_process_group, extended_api=True)


_register()

ProcessGroupTrnccl = _C.ProcessGroupTrnccl


def last_error(group=None):
    """trnccl's last error sentence on a trnccl process group (the default group if None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg.last_error()

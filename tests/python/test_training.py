"""Training through the "trnccl" backend: DDP gives the same parameters as DDP on gloo, and a
fully sharded data-parallel loop (the all_gather_into_tensor / reduce_scatter_tensor pattern
FSDP uses; Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11) gives
the parameters of serial training on the union of the ranks' data."""

import os
import sys
import unittest

import torch
import torch.nn as nn

from ranks import run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "torch"))
import ddp_train  # noqa: E402


def _ddp_body(rank, size, steps):
    model, losses, _ = ddp_train.train(steps)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), losses


def _model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))


def _batch(rank, step):
    g = torch.Generator().manual_seed(rank * 1000 + step)
    x = torch.randn(8, 6, generator=g, dtype=torch.float64)
    return x, torch.sin(x[:, :3])


def _sharded_body(rank, size, steps, lr):
    import torch.distributed as dist
    model = _model().double()
    params = list(model.parameters())
    flat = torch.cat([p.detach().flatten() for p in params])
    per_rank = -(-flat.numel() // size)
    padded = torch.zeros(per_rank * size, dtype=torch.float64)
    padded[:flat.numel()] = flat
    shard = padded[rank * per_rank:(rank + 1) * per_rank].clone()  # what this rank owns
    for step in range(steps):
        full = torch.empty(per_rank * size, dtype=torch.float64)
        dist.all_gather_into_tensor(full, shard)  # gather the parameters
        offset = 0
        for p in params:
            p.data.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        model.zero_grad()
        x, y = _batch(rank, step)
        nn.functional.mse_loss(model(x), y).backward()
        grads = torch.zeros(per_rank * size, dtype=torch.float64)
        grads[:flat.numel()] = torch.cat([p.grad.flatten() for p in params])
        grad_shard = torch.empty(per_rank, dtype=torch.float64)
        dist.reduce_scatter_tensor(grad_shard, grads, op=dist.ReduceOp.AVG)  # scatter the mean
        shard -= lr * grad_shard
    full = torch.empty(per_rank * size, dtype=torch.float64)
    dist.all_gather_into_tensor(full, shard)
    return full[:flat.numel()]


def _serial_reference(size, steps, lr):
    model = _model().double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        opt.zero_grad()
        # the mean of the ranks' mean losses (equal batch sizes): what the sharded loop averages
        loss = sum(nn.functional.mse_loss(model(x), y)
                   for x, y in (_batch(r, step) for r in range(size))) / size
        loss.backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


class Training(unittest.TestCase):
    def test_ddp_matches_gloo(self):
        ours = run(2, _ddp_body, 20)
        theirs = run(2, _ddp_body, 20, backend="gloo")
        self.assertTrue(torch.allclose(ours[0][0], ours[1][0]), "ranks disagree")
        self.assertTrue(torch.allclose(ours[0][0], theirs[0][0], atol=1e-6),
                        f"max difference {float((ours[0][0] - theirs[0][0]).abs().max())}")
        self.assertLess(ours[0][1][-1], ours[0][1][0], "the loss did not go down")

    def test_sharded_data_parallel_matches_serial_training(self):
        for size in (2, 3):
            got = run(size, _sharded_body, 10, 0.1)
            want = _serial_reference(size, 10, 0.1)
            for r in range(size):
                self.assertTrue(torch.allclose(got[r], want, atol=1e-10),
                                f"{size} ranks, rank {r}: max difference "
                                f"{float((got[r] - want).abs().max())}")


if __name__ == "__main__":
    unittest.main()

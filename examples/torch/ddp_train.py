"""DDP training of a small model with the "trnccl" backend.

    PYTHONPATH=build/python python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
        examples/torch/ddp_train.py [--steps N] [--backend trnccl|gloo]

Each rank trains on its own shard of a synthetic regression task; DDP averages the gradients
with trnccl's all-reduce. Rank 0 prints the loss, which goes down, and the mean step time.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import trnccl.torch  # noqa: F401  (registers the "trnccl" backend)


def model_and_data(rank, features=64, hidden=256, samples=512):
    torch.manual_seed(0)  # the same initial model on every rank (DDP also broadcasts it)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 1))
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    x = torch.randn(samples, features, generator=g)
    truth = torch.randn(features, 1, generator=torch.Generator().manual_seed(7))
    y = torch.tanh(x @ truth) + 0.01 * torch.randn(samples, 1, generator=g)
    return model, x, y


def train(steps, batch=64, lr=0.05):
    rank = dist.get_rank()
    model, x, y = model_and_data(rank)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    losses, times = [], []
    for step in range(steps):
        lo = (step * batch) % x.shape[0]
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x[lo:lo + batch]), y[lo:lo + batch])
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return model, losses, times


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--backend", default="trnccl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)  # env:// from torchrun
    _, losses, times = train(args.steps)
    if dist.get_rank() == 0:
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        median = sorted(times)[len(times) // 2]
        print(f"backend {args.backend}, {dist.get_world_size()} ranks: loss {first:.4f} -> "
              f"{last:.4f} over {args.steps} steps, median step {median * 1e3:.2f} ms")
        if not last < first:
            raise SystemExit("the loss did not go down")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

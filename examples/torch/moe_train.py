"""An MoE layer trained with trnccl.torch.TokenSwitch (expert parallelism).

    PYTHONPATH=build/python python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
        examples/torch/moe_train.py [--steps N]

Each rank holds num_experts / world_size experts (small MLPs) and a replica of the router.
Per step: the router picks each token's top-k experts, TokenSwitch dispatches the tokens to
the ranks holding them (expert-major layout: one zone per local expert), the local experts
run on their zones and weight their outputs by the gate, and combine brings the sums back in
the tokens' order. The backward pass runs the same exchange in reverse (autograd), reaching
the router through the gate weights. The router's gradients are averaged with all_reduce.
Rank 0 prints the loss, which goes down.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

import trnccl.torch as tt


class MoELayer(nn.Module):
    def __init__(self, switch, hidden, num_experts, top_k, capacity):
        super().__init__()
        self.switch, self.hidden, self.top_k, self.capacity = switch, hidden, top_k, capacity
        self.router = nn.Linear(hidden, num_experts)
        torch.manual_seed(1000 + dist.get_rank())  # each rank's own experts
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
            for _ in range(switch.num_local_experts))

    def forward(self, x):
        H, K, L = self.hidden, self.top_k, self.switch.num_local_experts
        scores = self.router(x).softmax(-1)
        weights, ids = scores.topk(K, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        counts = torch.zeros(L, dtype=torch.int32)
        routing = self.switch.create_routing(ids, counts, layout="expert_major")
        # The gate weights travel with the token (as extra columns), so that the router gets
        # its gradient through dispatch's backward (the contract gives the weights argument
        # none); the expert ids travel too, so each slot finds its own weight.
        payload = torch.cat([x, weights, ids.to(x.dtype)], dim=1)
        slots, _, _ = self.switch.dispatch(routing, payload, None, self.capacity)
        hidden, slot_w, slot_ids = slots[:, :H], slots[:, H:H + K], slots[:, H + K:]
        received = int(counts.sum())
        zone = torch.repeat_interleave(torch.arange(L), counts.long())
        mine = zone + dist.get_rank() * L
        own_weight = (slot_w[:received] * (slot_ids[:received] == mine.unsqueeze(1))).sum(1)
        outs, start = [], 0
        for expert, n in zip(self.experts, counts.tolist()):
            outs.append(expert(hidden[start:start + n]))
            start += n
        out = torch.cat(outs) * own_weight.unsqueeze(1)
        out = torch.cat([out, out.new_zeros(self.capacity - received, H)])  # unused capacity
        return self.switch.combine(routing, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--experts-per-rank", type=int, default=2)
    parser.add_argument("--top-k", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("trnccl")
    world, rank = dist.get_world_size(), dist.get_rank()
    num_experts = args.experts_per_rank * world
    capacity = world * args.tokens * args.top_k
    payload_bytes = (args.hidden + 2 * args.top_k) * 4  # token, gate weights, expert ids
    switch = tt.TokenSwitch(None, num_experts, args.tokens, capacity, payload_bytes,
                            dtype=torch.float32)
    torch.manual_seed(0)
    layer = MoELayer(switch, args.hidden, num_experts, args.top_k, capacity)
    opt = torch.optim.Adam(layer.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(10 + rank)
    target_map = torch.randn(args.hidden, args.hidden, generator=torch.Generator().manual_seed(3))
    losses, router_grad = [], 0.0
    for _ in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, generator=g)
        y = torch.tanh(x @ target_map)
        opt.zero_grad()
        loss = nn.functional.mse_loss(layer(x), y)
        loss.backward()
        for p in layer.router.parameters():  # the router is replicated: average its gradient
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        router_grad = max(router_grad, float(layer.router.weight.grad.norm()))
        opt.step()
        losses.append(loss.item())
    if rank == 0:
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        print(f"MoE layer, {world} ranks, {num_experts} experts, top-{args.top_k}: loss "
              f"{first:.4f} -> {last:.4f} over {args.steps} steps (router gradient norm up to "
              f"{router_grad:.3g})")
        if not last < 0.8 * first:
            raise SystemExit("the loss did not go down")
        if router_grad == 0.0:
            raise SystemExit("the router got no gradient")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

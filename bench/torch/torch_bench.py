"""trnccl's torch backend beside gloo, in one job (issue 18's targets).

    PYTHONPATH=build/python build/bench/trnccl-run -np 2 python3 bench/torch/torch_bench.py \
        [--rounds R] [--quick] [-J results.json]

The default process group is trnccl; a gloo group over the same ranks runs the same calls.
Every row alternates the contenders round by round (so a slow spell of this shared machine
hits both) and reports medians over the rounds of rank 0's time, each round starting after a
barrier:
  all_reduce 64 MiB float32     algbw and busbw (2 (n-1)/n x bytes / time), trnccl vs gloo
  all_reduce 4 B                Python-to-Python latency per call
  DDP step                      examples/torch/ddp_train.py's model, one training step
  MoE dispatch + combine        T=2048 tokens x H=2048 bf16, top-4 of 16 experts: TokenSwitch
                                (create_routing + dispatch + combine, identity experts) vs the
                                TorchTitan-style dispatcher (count exchange, host sync,
                                permute, all_to_all_single there and back, unpermute, sum
                                over k) on gloo and on trnccl; one torch thread per rank
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import trnccl.torch as tt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "torch"))


def timed(fn, group):
    dist.barrier(group=group)
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(contenders, rounds, warmup=2):
    """contenders: {name: (fn, group)} -> {name: [seconds per round]}"""
    for _ in range(warmup):
        for fn, group in contenders.values():
            timed(fn, group)
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (fn, group) in contenders.items():
            times[name].append(timed(fn, group))
    return times


def titan_dispatcher(group, E, move_dtype):
    """What TorchTitan's AllToAllTokenDispatcher does by hand: exchange per-expert counts,
    sync them to the host, permute token copies into expert order, all_to_all_single them,
    and on the way back all_to_all_single, unpermute and sum each token's k copies (unweighted,
    as TokenSwitch's combine: weighting in fp32 would add ~70 ms here, measured)."""
    world = dist.get_world_size(group)

    def round_trip(x, ids):
        T, K = ids.shape
        flat_ids = ids.flatten()
        tokens_per_expert = torch.bincount(flat_ids, minlength=E)
        received_per_expert = torch.empty_like(tokens_per_expert)
        dist.all_to_all_single(received_per_expert, tokens_per_expert, group=group)
        send_splits = tokens_per_expert.view(world, -1).sum(1).tolist()  # host sync
        recv_splits = received_per_expert.view(world, -1).sum(1).tolist()
        order = torch.argsort(flat_ids, stable=True)
        permuted = x.index_select(0, order // K)  # one copy per (token, expert)
        received = torch.empty(sum(recv_splits), x.shape[1], dtype=x.dtype)
        dist.all_to_all_single(received.view(move_dtype), permuted.view(move_dtype),
                               recv_splits, send_splits, group=group)
        expert_out = received  # identity experts
        back = torch.empty_like(permuted)
        dist.all_to_all_single(back.view(move_dtype), expert_out.view(move_dtype), send_splits,
                               recv_splits, group=group)
        unpermuted = torch.empty_like(back)
        unpermuted[order] = back
        return unpermuted.view(T, K, -1).sum(1)

    return round_trip


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 rounds (a smoke run)")
    parser.add_argument("-J", "--json", help="write the medians here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("trnccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    ours = dist.distributed_c10d._get_default_group()
    rounds = 3 if args.quick else args.rounds
    rows = []

    def report(name, times_by, unit_fn, unit):
        meds = {k: statistics.median(v) for k, v in times_by.items()}
        rows.append({"row": name, "median_s": meds, "rounds": rounds})
        if rank == 0:
            parts = [f"{k} {unit_fn(m)}" for k, m in meds.items()]
            print(f"{name:<34} " + "   ".join(parts) + f"   ({unit})", flush=True)
        return meds

    if rank == 0:
        print(f"torch {torch.__version__}, {world} ranks, {os.cpu_count()} cores, medians over "
              f"{rounds} interleaved rounds", flush=True)

    # all_reduce 64 MiB float32: bandwidth
    count = (1 << 14) if args.quick else (16 << 20)
    buf = torch.ones(count)
    meds = report(
        f"all_reduce {count * 4 >> 20} MiB float32",
        interleaved({"trnccl": (lambda: dist.all_reduce(buf, group=ours), ours),
                     "gloo": (lambda: dist.all_reduce(buf, group=gloo), gloo)}, rounds),
        lambda s: f"{count * 4 / s / 1e9 * 2 * (world - 1) / world:7.2f}", "busbw GB/s")
    if rank == 0:
        print(f"{'':<34} trnccl / gloo bandwidth: {meds['gloo'] / meds['trnccl']:.2f}x")

    # all_reduce 4 B: Python overhead + latency (many calls per round)
    small = torch.ones(1)
    calls = 200 if args.quick else 2000

    def many(group):
        return lambda: [dist.all_reduce(small, group=group) for _ in range(calls)]

    meds = report("all_reduce 4 B (per call)",
                  interleaved({"trnccl": (many(ours), ours), "gloo": (many(gloo), gloo)}, rounds),
                  lambda s: f"{s / calls * 1e6:7.1f}", "us")
    if rank == 0:
        print(f"{'':<34} trnccl / gloo time: {meds['trnccl'] / meds['gloo']:.2f}x")

    # DDP step of the example model
    import ddp_train
    from torch.nn.parallel import DistributedDataParallel as DDP
    steps = 5 if args.quick else 20

    def ddp_steps(group):
        model, x, y = ddp_train.model_and_data(rank)
        ddp = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)

        def run():
            for s in range(steps):
                lo = (s * 64) % x.shape[0]
                opt.zero_grad()
                torch.nn.functional.mse_loss(ddp(x[lo:lo + 64]), y[lo:lo + 64]).backward()
                opt.step()
        return run

    meds = report("DDP step (example model)",
                  interleaved({"trnccl": (ddp_steps(ours), ours), "gloo": (ddp_steps(gloo), gloo)},
                              rounds),
                  lambda s: f"{s / steps * 1e3:7.2f}", "ms")
    if rank == 0:
        print(f"{'':<34} trnccl / gloo time: {meds['trnccl'] / meds['gloo']:.2f}x")

    # MoE dispatch + combine
    T, H, K, E = (128, 256, 4, 16) if args.quick else (2048, 2048, 4, 16)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    weights = torch.rand(T, K, generator=g)
    cap = world * T * K
    switch = tt.TokenSwitch(ours, E, T, cap, H * 2, dtype=torch.bfloat16)
    out_tokens = torch.empty(cap, H, dtype=torch.bfloat16)
    out_w = torch.empty(cap, K)
    out_idx = torch.empty(cap, K, dtype=torch.int64)
    combined = torch.empty(T, H, dtype=torch.bfloat16)

    def token_switch(layout):
        outs = (out_tokens, out_w if layout == "flat" else torch.empty(cap),
                out_idx if layout == "flat" else None)

        def run():
            routing = switch.create_routing(ids, layout=layout)
            switch.dispatch(routing, x, weights, out=outs)
            switch.combine(routing, outs[0], out=combined)
        return run

    titan_gloo = titan_dispatcher(gloo, E, torch.float16)  # gloo moves bf16 as 2-byte words
    titan_ours = titan_dispatcher(ours, E, torch.bfloat16)
    meds = report(
        f"MoE T={T} H={H} bf16 K={K} E={E}",
        interleaved({"TokenSwitch flat": (token_switch("flat"), ours),
                     "TokenSwitch expert_major": (token_switch("expert_major"), ours),
                     "titan on trnccl": (lambda: titan_ours(x, ids), ours),
                     "titan on gloo": (lambda: titan_gloo(x, ids), gloo)}, rounds),
        lambda s: f"{s * 1e3:8.2f}", "ms per dispatch + combine")
    if rank == 0:
        ts = meds["TokenSwitch flat"]
        print(f"{'':<34} titan on gloo / TokenSwitch: {meds['titan on gloo'] / ts:.2f}x, "
              f"titan on trnccl / TokenSwitch: {meds['titan on trnccl'] / ts:.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""trnccl.torch.TokenSwitch on real ranks: dispatch and combine against a single-process
reference of PyTorch's TokenSwitch contract (both layouts, -1 entries, skewed routing), the
autograd rules (dispatch backward = combine of the gradient, combine backward = dispatch),
torch.autograd.gradcheck in float64, out=, and refused input."""

import unittest

import torch
import torch.distributed as dist

from ranks import run


def routing_of(rank, T, K, E, zipf, none_every=7):
    """Rank `rank`'s top-k ids: K distinct experts drawn with a Zipf skew, some entries -1."""
    g = torch.Generator().manual_seed(1000 + rank)
    weights = 1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** zipf
    idx = torch.stack([torch.multinomial(weights, K, replacement=False, generator=g)
                       for _ in range(T)]).to(torch.int64)
    for t in range(T):
        if (t + rank) % none_every == 0:
            idx[t, (t + rank) % K] = -1
    return idx


def tokens_of(rank, T, H, dtype):
    # small multiples of 1/4: exact in bf16 and in every sum below
    t = torch.arange(T, dtype=torch.float64).unsqueeze(1)
    h = torch.arange(H, dtype=torch.float64).unsqueeze(0)
    return (((rank * 7 + t * 3 + h) % 13) / 4 - 1).to(dtype)


def weights_of(rank, T, K):
    g = torch.Generator().manual_seed(77 + rank)
    return (torch.randint(1, 8, (T, K), generator=g) / 8).to(torch.float32)


def reference(all_idx, all_w, rank, size, E, layout):
    """What `rank` receives, from the contract alone: a list of (source, token, local ids,
    weights) rows (flat), or of (source, token, local id, weight) slots zone by zone."""
    L = E // size
    lo = rank * L
    if layout == "flat":
        rows = []
        for src in range(size):
            for t in range(all_idx[src].shape[0]):
                mine = sorted((int(e) - lo, k) for k, e in enumerate(all_idx[src][t].tolist())
                              if lo <= e < lo + L)
                if mine:
                    rows.append((src, t, [i for i, _ in mine],
                                 [float(all_w[src][t, k]) for _, k in mine]))
        return rows
    slots = []
    for e in range(L):
        for src in range(size):
            for t in range(all_idx[src].shape[0]):
                for k, x in enumerate(all_idx[src][t].tolist()):
                    if x == lo + e:
                        slots.append((src, t, e, float(all_w[src][t, k])))
    return slots


def _layout_body(rank, size, E, T, K, H, layout, zipf, dtype, mode):
    import trnccl.torch as tt
    all_idx = [routing_of(r, T, K, E, zipf) for r in range(size)]
    all_w = [weights_of(r, T, K) for r in range(size)]
    all_x = [tokens_of(r, T, H, dtype) for r in range(size)]
    L = E // size
    cap = size * T * K
    ts = tt.TokenSwitch(None, E, T, cap, H * all_x[0].element_size(), dtype=dtype, mode=mode)
    counts = torch.full((L + 2,), -5, dtype=torch.int32)
    routing = ts.create_routing(all_idx[rank], counts if mode != "low_latency" else None,
                                layout=layout)
    out_tokens, out_w, out_idx = ts.dispatch(routing, all_x[rank], all_w[rank], cap)
    ref = reference(all_idx, all_w, rank, size, E, layout)
    n = routing.num_recv_tokens
    assert n == len(ref), (n, len(ref))
    per_expert = [0] * L
    for item in ref:
        for e in (item[2] if layout == "flat" else [item[2]]):
            per_expert[e] += 1
    assert routing.per_expert_token_counts.tolist() == per_expert
    if mode != "low_latency":
        assert counts[:L].tolist() == per_expert and counts[L:].tolist() == [-5, -5]
    for i, item in enumerate(ref):
        src, t = item[0], item[1]
        assert torch.equal(out_tokens[i], all_x[src][t]), (i, item)
        if layout == "flat":
            ids = item[2] + [-1] * (K - len(item[2]))
            ws = item[3] + [0.0] * (K - len(item[3]))
            assert out_idx[i].tolist() == ids, (i, out_idx[i].tolist(), ids)
            assert out_w[i].tolist() == ws, (i, out_w[i].tolist(), ws)
        else:
            assert out_idx is None
            assert float(out_w[i]) == item[3]
    # identity experts: flat gives x * (destination ranks), expert_major x * (valid experts)
    y = ts.combine(routing, out_tokens)
    x = all_x[rank].to(torch.float64)
    valid = (all_idx[rank] >= 0)
    if layout == "flat":
        factor = torch.tensor([len({int(e) // L for e in row if e >= 0})
                               for row in all_idx[rank].tolist()], dtype=torch.float64)
    else:
        factor = valid.sum(1).to(torch.float64)
    assert torch.equal(y.to(torch.float64), x * factor.unsqueeze(1)), "identity combine"
    if layout == "expert_major":
        yw = ts.combine(routing, out_tokens, weighted=True)
        wsum = (all_w[rank].to(torch.float64) * valid).sum(1)
        assert torch.allclose(yw.to(torch.float64), x * wsum.unsqueeze(1), rtol=1e-2), "weighted"
    # the routing is reusable: a second step with other tokens
    out2, _, _ = ts.dispatch(routing, all_x[rank] * 2, all_w[rank], cap)
    assert torch.equal(out2[:n], out_tokens[:n] * 2)
    return n


def _autograd_body(rank, size, layout):
    import trnccl.torch as tt
    E, T, K, H = 2 * size, 5, 2, 3
    all_idx = [routing_of(r, T, K, E, 1.0, none_every=3) for r in range(size)]
    all_w = [weights_of(r, T, K) for r in range(size)]
    cap = size * T * K
    ts = tt.TokenSwitch(None, E, T, cap, H * 8, dtype=torch.float64)
    routing = ts.create_routing(all_idx[rank], layout=layout)
    x = tokens_of(rank, T, H, torch.float64).requires_grad_()

    def upstream(r, rows):
        return torch.randn(rows, H, generator=torch.Generator().manual_seed(5 + r),
                           dtype=torch.float64)

    # dispatch backward: each token's gradient is the sum of the upstream gradients of its
    # rows, on whichever rank they landed
    rows, w, idx = ts.dispatch(routing, x, all_w[rank], cap)
    assert rows.requires_grad and not w.requires_grad
    (rows * upstream(rank, cap)).sum().backward()
    want = torch.zeros(T, H, dtype=torch.float64)
    for q in range(size):
        G = upstream(q, cap)
        for i, item in enumerate(reference(all_idx, all_w, q, size, E, layout)):
            if item[0] == rank:
                want[item[1]] += G[i]
    assert torch.allclose(x.grad, want), ("dispatch backward", x.grad, want)

    # combine backward: each received row gets its token's gradient from its source rank;
    # rows past the received count get zero
    e = rows.detach().clone().requires_grad_()
    y = ts.combine(routing, e)
    (y * upstream(100 + rank, T)).sum().backward()
    ref = reference(all_idx, all_w, rank, size, E, layout)
    want_e = torch.zeros(cap, H, dtype=torch.float64)
    for i, item in enumerate(ref):
        want_e[i] = upstream(100 + item[0], T)[item[1]]
    assert torch.allclose(e.grad, want_e), ("combine backward", e.grad, want_e)

    # gradcheck of the round trip with a row-dependent expert (every rank runs the same
    # number of evaluations, so the collectives line up)
    def round_trip(inp):
        r, _, ids = ts.dispatch(routing, inp, all_w[rank], cap)
        if ids is not None:
            scale = 1.0 + ids.clamp(min=0).sum(1, keepdim=True).to(inp.dtype)
        else:
            scale = torch.linspace(1, 2, cap, dtype=inp.dtype).unsqueeze(1)
        return ts.combine(routing, r * scale)

    ok = torch.autograd.gradcheck(round_trip, (x.detach().clone().requires_grad_(),),
                                  check_undefined_grad=False, check_batched_grad=False)
    # out= skips autograd
    out = (torch.empty(cap, H, dtype=torch.float64),
           torch.empty(cap, K) if layout == "flat" else torch.empty(cap),
           torch.empty(cap, K, dtype=torch.int64) if layout == "flat" else None)
    got = ts.dispatch(routing, x, all_w[rank], out=out)
    assert got[0] is out[0] and not got[0].requires_grad
    return ok


def _errors_body(rank, size):
    import trnccl.torch as tt
    messages = {}

    def expect(name, fn):
        try:
            fn()
        except (ValueError, RuntimeError, TypeError) as error:
            messages[name] = str(error)
            return
        raise AssertionError(f"{name}: no error")

    E, T, K, H = 2 * size, 4, 2, 8
    ts = tt.TokenSwitch(None, E, T, size * T, H * 2)
    good = routing_of(rank, T, K, E, 0.0)
    expect("layout", lambda: ts.create_routing(good, layout="rows"))
    bad = good.clone()
    bad[0, 0] = E  # an expert that does not exist, on every rank alike
    expect("expert id", lambda: ts.create_routing(bad))
    dup = good.clone()
    dup[1, 1] = dup[1, 0] = 0
    expect("duplicate", lambda: ts.create_routing(dup))
    routing = ts.create_routing(good)
    x = tokens_of(rank, T, H, torch.bfloat16)
    expect("max_recv", lambda: ts.dispatch(routing, x, None))
    wide = tokens_of(rank, T, 2 * H, torch.bfloat16)  # rows longer than max_token_bytes
    expect("token bytes", lambda: ts.dispatch(routing, wide, None, 64))
    expect("token dtype", lambda: ts.dispatch(routing, x.to(torch.int32), None, 64))
    # overflow: every token of every rank to rank 0's expert 0 with room for 2 rows
    tight = tt.TokenSwitch(None, E, T, T, H * 2)
    everyone = torch.zeros(T, 1, dtype=torch.int64)
    expect("overflow", lambda: tight.create_routing(everyone))
    expect("gloo group", lambda: tt.TokenSwitch(dist.new_group(backend="gloo"), E, T, T, H))
    return messages


class TokenSwitchContract(unittest.TestCase):
    def test_flat_two_ranks(self):
        run(2, _layout_body, 8, 11, 3, 6, "flat", 1.2, torch.bfloat16, "normal")

    def test_expert_major_three_ranks(self):
        run(3, _layout_body, 6, 9, 2, 5, "expert_major", 0.0, torch.float32, "normal")

    def test_flat_skewed_four_ranks_fp32(self):
        run(4, _layout_body, 16, 12, 4, 4, "flat", 2.0, torch.float32, "normal")

    def test_expert_major_skewed_two_ranks_bf16(self):
        run(2, _layout_body, 8, 16, 4, 8, "expert_major", 1.5, torch.bfloat16, "normal")

    def test_low_latency_mode(self):
        run(2, _layout_body, 4, 6, 2, 4, "flat", 0.5, torch.bfloat16, "low_latency")


class TokenSwitchAutograd(unittest.TestCase):
    def test_flat(self):
        self.assertTrue(all(run(2, _autograd_body, "flat").values()))

    def test_expert_major(self):
        self.assertTrue(all(run(2, _autograd_body, "expert_major").values()))


class TokenSwitchErrors(unittest.TestCase):
    def test_bad_input(self):
        messages = run(2, _errors_body)[0]
        self.assertIn("expert_major", messages["layout"])
        self.assertIn("max_recv_tokens", messages["max_recv"])
        self.assertIn("trnccl", messages["gloo group"])
        for name in ("expert id", "duplicate", "overflow"):
            self.assertIn("rank", messages[name], name)
        self.assertIn("maxRecvTokensPerRank", messages["overflow"])
        self.assertIn("maxTokenBytes", messages["token bytes"])
        self.assertIn("int32", messages["token dtype"])


if __name__ == "__main__":
    unittest.main()

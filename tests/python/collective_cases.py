"""Every collective of the process group, on every dtype, checked against a serial reference.

Each rank computes every rank's inputs itself (they are a function of the rank), so the
expected result of every call is computed serially, in float64 or int64, independently of any
communication library. Values are small multiples of 1/4, so sums, products, minima and maxima
are exact in every dtype (averages are compared with a tolerance).
"""

import io

import torch
import torch.distributed as dist

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}


def data(rank, n, dtype, kind="sum"):
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return (i + rank) % 3 == 0
    if kind == "prod":
        v = torch.tensor([1, -1, 2, 1, 1])[(i * 3 + rank) % 5]
    else:
        v = (rank * 13 + i * 7) % 11 - 5
    if dtype == torch.uint8:
        v = v.abs()
    if dtype.is_floating_point:
        return (v.to(torch.float64) / 4).to(dtype)
    return v.to(dtype)


def reference(op, tensors, dtype):
    if dtype == torch.bool:
        x = torch.stack(tensors)
        return x.any(0) if op in ("SUM", "MAX") else x.all(0)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    x = torch.stack([t.to(wide) for t in tensors])
    if op == "SUM":
        r = x.sum(0)
    elif op == "PRODUCT":
        r = x.prod(0)
    elif op == "MIN":
        r = x.min(0).values
    elif op == "MAX":
        r = x.max(0).values
    else:
        r = x.sum(0) / len(tensors)
    return r.to(dtype)


def ops_for(dtype):
    ops = ["SUM", "PRODUCT", "MIN", "MAX"]
    if dtype.is_floating_point:
        ops.append("AVG")
    return ops


class Checker:
    """Collects mismatches (so one run reports all of them) and the outputs (for gloo)."""

    def __init__(self, rank):
        self.rank = rank
        self.problems = []
        self.outputs = {}

    def same(self, name, got, want, tolerance=False):
        self.outputs[name] = got.clone()
        if got.dtype != want.dtype or got.shape != want.shape:
            self.problems.append(f"rank {self.rank} {name}: got {got.dtype}{list(got.shape)}, "
                                 f"want {want.dtype}{list(want.shape)}")
            return
        if tolerance:
            ok = torch.allclose(got.to(torch.float64), want.to(torch.float64), rtol=1e-2,
                                atol=1e-2)
        else:
            ok = torch.equal(got, want)
        if not ok:
            bad = (got.to(torch.float64) != want.to(torch.float64)).nonzero()
            first = bad[0].tolist() if len(bad) else "?"
            self.problems.append(f"rank {self.rank} {name}: {len(bad)} elements differ, first at "
                                 f"{first}: got {got.flatten()[:6].tolist()} want "
                                 f"{want.flatten()[:6].tolist()}")


def _try(check, name, fn):
    """Runs one case; a backend that lacks it (gloo) records the error instead of failing."""
    try:
        fn()
    except (RuntimeError, ValueError) as error:
        check.outputs[name] = "unsupported: " + str(error).splitlines()[0]
        if not check.tolerate_errors:
            raise


def all_cases(rank, size, tolerate_errors=False):
    """Runs every case; returns (problems, serialized outputs)."""
    check = Checker(rank)
    check.tolerate_errors = tolerate_errors
    n = 37
    for dtype in DTYPES:
        d = str(dtype).replace("torch.", "")

        for op in ops_for(dtype):
            kind = "prod" if op == "PRODUCT" else "sum"

            def all_reduce():
                t = data(rank, n, dtype, kind)
                dist.all_reduce(t, OPS[op])
                want = reference(op, [data(r, n, dtype, kind) for r in range(size)], dtype)
                check.same(f"all_reduce {op} {d}", t, want, tolerance=op == "AVG")
            _try(check, f"all_reduce {op} {d}", all_reduce)

        def broadcast():
            root = size - 1
            t = data(rank, n, dtype)
            dist.broadcast(t, src=root)
            check.same(f"broadcast {d}", t, data(root, n, dtype))
        _try(check, f"broadcast {d}", broadcast)

        for op in ("SUM", "MAX"):
            def reduce():
                t = data(rank, n, dtype)
                dist.reduce(t, dst=0, op=OPS[op])
                if rank == 0:
                    want = reference(op, [data(r, n, dtype) for r in range(size)], dtype)
                    check.same(f"reduce {op} {d}", t, want)
            _try(check, f"reduce {op} {d}", reduce)

        def all_gather():
            outs = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, data(rank, n, dtype))
            for r in range(size):
                check.same(f"all_gather {d} [{r}]", outs[r], data(r, n, dtype))
        _try(check, f"all_gather {d}", all_gather)

        def all_gather_into_tensor():
            flat = torch.empty(size * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, data(rank, n, dtype))
            check.same(f"all_gather_into_tensor {d}", flat,
                       torch.cat([data(r, n, dtype) for r in range(size)]))
        _try(check, f"all_gather_into_tensor {d}", all_gather_into_tensor)

        for op in ("SUM", "MIN"):
            def reduce_scatter():
                pieces = [data(rank * size + j, n, dtype) for j in range(size)]
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, pieces, op=OPS[op])
                want = reference(op, [data(r * size + rank, n, dtype) for r in range(size)],
                                 dtype)
                check.same(f"reduce_scatter {op} {d}", out, want)
                out2 = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out2, torch.cat(pieces), op=OPS[op])
                check.same(f"reduce_scatter_tensor {op} {d}", out2, want)
            _try(check, f"reduce_scatter {op} {d}", reduce_scatter)

        def all_to_all():
            # rank r sends (r + j + 1) elements to rank j: uneven on purpose
            ins = [data(rank * 100 + j, rank + j + 1, dtype) for j in range(size)]
            outs = [torch.empty(j + rank + 1, dtype=dtype) for j in range(size)]
            dist.all_to_all(outs, ins)
            for j in range(size):
                check.same(f"all_to_all {d} from {j}", outs[j],
                           data(j * 100 + rank, j + rank + 1, dtype))
        _try(check, f"all_to_all {d}", all_to_all)

        def all_to_all_single():
            # all_to_all_single with row splits over a 2-D tensor
            rows_out = [rank + j + 1 for j in range(size)]  # what rank j sends to me
            src = torch.cat([data(rank * 100 + j, (rank + j + 1) * 3, dtype).view(-1, 3)
                             for j in range(size)])
            dst = torch.empty(sum(rows_out), 3, dtype=dtype)
            dist.all_to_all_single(dst, src, output_split_sizes=rows_out,
                                   input_split_sizes=[rank + j + 1 for j in range(size)])
            want = torch.cat([data(j * 100 + rank, (j + rank + 1) * 3, dtype).view(-1, 3)
                              for j in range(size)])
            check.same(f"all_to_all_single splits {d}", dst, want)
            eq_src = data(rank, size * 4, dtype)
            eq_dst = torch.empty(size * 4, dtype=dtype)
            dist.all_to_all_single(eq_dst, eq_src)
            check.same(f"all_to_all_single {d}", eq_dst,
                       torch.cat([data(j, size * 4, dtype)[rank * 4:rank * 4 + 4]
                                  for j in range(size)]))
        _try(check, f"all_to_all_single {d}", all_to_all_single)

        def gather_scatter():
            root = 1 % size
            outs = [torch.empty(n, dtype=dtype) for _ in range(size)] if rank == root else None
            dist.gather(data(rank, n, dtype), gather_list=outs, dst=root)
            if rank == root:
                for r in range(size):
                    check.same(f"gather {d} [{r}]", outs[r], data(r, n, dtype))
            got = torch.empty(n, dtype=dtype)
            ins = [data(50 + r, n, dtype) for r in range(size)] if rank == 0 else None
            dist.scatter(got, scatter_list=ins, src=0)
            check.same(f"scatter {d}", got, data(50 + rank, n, dtype))
        _try(check, f"gather/scatter {d}", gather_scatter)

        def point_to_point():
            right, left = (rank + 1) % size, (rank - 1) % size
            got = torch.empty(n, dtype=dtype)
            ops = [dist.P2POp(dist.isend, data(rank, n, dtype), right),
                   dist.P2POp(dist.irecv, got, left)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            check.same(f"batch_isend_irecv ring {d}", got, data(left, n, dtype))
            if rank < 2:
                other = 1 - rank
                t = data(rank, n, dtype)
                if rank == 0:
                    dist.send(t, dst=other)
                    dist.recv(t, src=other)
                else:
                    got1 = torch.empty(n, dtype=dtype)
                    dist.recv(got1, src=other)
                    dist.send(t, dst=other)
                    t = got1
                check.same(f"send/recv {d}", t, data(other, n, dtype))
        _try(check, f"send/recv {d}", point_to_point)

    def coalesced():
        ts = [data(rank, 5, torch.float32), data(rank + 1, 7, torch.float32)]
        dist.all_reduce_coalesced(ts)
        check.same("all_reduce_coalesced [0]", ts[0],
                   reference("SUM", [data(r, 5, torch.float32) for r in range(size)],
                             torch.float32))
        check.same("all_reduce_coalesced [1]", ts[1],
                   reference("SUM", [data(r + 1, 7, torch.float32) for r in range(size)],
                             torch.float32))
        outs = [[torch.empty(3), torch.empty(4)] for _ in range(size)]
        dist.all_gather_coalesced(outs, [data(rank, 3, torch.float32),
                                         data(rank + 9, 4, torch.float32)])
        for r in range(size):
            check.same(f"all_gather_coalesced [{r}][0]", outs[r][0], data(r, 3, torch.float32))
            check.same(f"all_gather_coalesced [{r}][1]", outs[r][1],
                       data(r + 9, 4, torch.float32))
    _try(check, "coalesced", coalesced)

    def odd_types_and_layouts():
        # complex sums as pairs of reals; int16 moves as bytes
        c = torch.complex(data(rank, n, torch.float32), data(rank + 1, n, torch.float32))
        dist.all_reduce(c)
        want = torch.complex(reference("SUM", [data(r, n, torch.float32) for r in range(size)],
                                       torch.float32),
                             reference("SUM", [data(r + 1, n, torch.float32)
                                               for r in range(size)], torch.float32))
        check.same("all_reduce complex64", c, want)
        outs = [torch.empty(n, dtype=torch.int16) for _ in range(size)]
        dist.all_gather(outs, data(rank, n, torch.int32).to(torch.int16))
        for r in range(size):
            check.same(f"all_gather int16 [{r}]", outs[r], data(r, n, torch.int32).to(torch.int16))
        # non-contiguous tensors: a strided view reduced in place, untouched columns intact
        base = data(rank, 8 * 6, torch.float32).view(8, 6).clone()
        view = base[:, ::2]
        dist.all_reduce(view)
        want_base = data(rank, 8 * 6, torch.float32).view(8, 6).clone()
        want_base[:, ::2] = reference("SUM", [data(r, 48, torch.float32).view(8, 6)[:, ::2]
                                              for r in range(size)], torch.float32)
        check.same("all_reduce strided view", base, want_base)
        outs = [torch.empty(6, 4).t() for _ in range(size)]  # transposed: not contiguous
        dist.all_gather(outs, data(rank, 24, torch.float32).view(4, 6))
        for r in range(size):
            check.same(f"all_gather into transposed [{r}]", outs[r],
                       data(r, 24, torch.float32).view(4, 6))
        # a large all-reduce (the big-message paths)
        big = data(rank, 1 << 20, torch.float32)
        dist.all_reduce(big)
        check.same("all_reduce 4 MiB", big,
                   reference("SUM", [data(r, 1 << 20, torch.float32) for r in range(size)],
                             torch.float32))
        dist.barrier()
    _try(check, "odd types and layouts", odd_types_and_layouts)

    serialized = {}
    for name, value in check.outputs.items():
        buffer = io.BytesIO()
        torch.save(value, buffer)
        serialized[name] = buffer.getvalue()
    return check.problems, serialized


def load(blob):
    return torch.load(io.BytesIO(blob))

"""The "trnccl" torch.distributed backend: every collective and dtype against a serial
reference and against gloo, asynchronous calls and futures, timeouts, subgroups, bad input
and a dead peer. Real rank processes; no mocks."""

import datetime
import os
import time
import unittest

import torch
import torch.distributed as dist

import collective_cases
from ranks import run


class Collectives(unittest.TestCase):
    def check_size(self, size):
        trnccl = run(size, collective_cases.all_cases, False, deadline_s=240)
        problems = [p for r in range(size) for p in trnccl[r][0]]
        self.assertEqual(problems, [], "\n".join(problems[:40]))
        # The same calls on gloo: where gloo implements one, both give the same tensors.
        gloo = run(size, collective_cases.all_cases, True, backend="gloo", deadline_s=240)
        compared = 0
        for r in range(size):
            ours, theirs = trnccl[r][1], gloo[r][1]
            for name, blob in ours.items():
                if name not in theirs:
                    continue
                got, other = collective_cases.load(blob), collective_cases.load(theirs[name])
                if isinstance(other, str):  # gloo lacks this case
                    continue
                compared += 1
                if got.dtype.is_floating_point and "AVG" in name:
                    self.assertTrue(torch.allclose(got.double(), other.double(), rtol=1e-2),
                                    f"rank {r} {name}: trnccl and gloo differ")
                else:
                    self.assertTrue(torch.equal(got, other),
                                    f"rank {r} {name}: trnccl {got[:6]} gloo {other[:6]}")
        self.assertGreater(compared, 100, "too few cases compared with gloo")

    def test_two_ranks(self):
        self.check_size(2)

    def test_three_ranks(self):
        self.check_size(3)


def _async_body(rank, size):
    # Many outstanding calls, waited for out of order; polling; futures with callbacks.
    tensors = [torch.full((1000,), float(rank + i)) for i in range(10)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    for w in reversed(works):
        w.wait()
    for i, t in enumerate(tensors):
        assert torch.equal(t, torch.full((1000,), float(sum(r + i for r in range(size))))), i
    t = torch.ones(100000)
    w = dist.all_reduce(t, async_op=True)
    while not w.is_completed():
        pass
    assert w.is_success() and torch.equal(t, torch.full((100000,), float(size)))
    fut = dist.all_reduce(torch.ones(8), async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    assert torch.equal(doubled.wait(), torch.full((8,), 2.0 * size))
    # A Work dropped before it finished: the call still completes (the watcher finishes it).
    keep = torch.ones(50000)
    dist.all_reduce(keep, async_op=True)
    dist.barrier()
    assert torch.equal(keep, torch.full((50000,), float(size)))
    return True


def _late_peer_body(rank, size):
    # Rank 1 arrives 1.5 s late: rank 0's wait(timeout=0.2 s) raises, names the call and the
    # knob, and the call stays valid: a second wait succeeds.
    t = torch.ones(4)
    if rank == 1:
        time.sleep(1.5)
        dist.all_reduce(t)
        return None
    w = dist.all_reduce(t, async_op=True)
    start = time.monotonic()
    try:
        w.wait(timeout=datetime.timedelta(milliseconds=200))
        raise AssertionError("wait(0.2 s) returned while the peer was 1.5 s late")
    except RuntimeError as error:
        took = time.monotonic() - start
        message = str(error)
    w.wait()
    assert torch.equal(t, torch.full((4,), 2.0))
    return took, message


def _cpu_while_blocked_body(rank, size):
    # A rank blocked 2 s in all_reduce sleeps instead of spinning.
    t = torch.ones(4)
    if rank == 1:
        time.sleep(2.0)
        dist.all_reduce(t)
        return None
    before = time.process_time()
    dist.all_reduce(t)
    return time.process_time() - before


def _dead_peer_body(rank, size):
    dist.barrier()
    if rank == 1:
        os._exit(3)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 16))
        raise AssertionError("all_reduce with a dead peer returned")
    except RuntimeError as error:
        return time.monotonic() - start, str(error)


def _stalled_peer_body(rank, size):
    if rank == 1:
        time.sleep(6)  # never calls all_reduce within the 2 s timeout
        return None
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(16))
        raise AssertionError("all_reduce with a stalled peer returned")
    except RuntimeError as error:
        return time.monotonic() - start, str(error)


def _subgroup_body(rank, size):
    evens = dist.new_group([0, 2])
    tail = dist.new_group([1, 2])
    # subgroups of a trnccl job are splits of the default group's communicator
    for group, members in ((evens, (0, 2)), (tail, (1, 2))):
        if rank in members:
            assert group.name.startswith("torch:split"), group.name
    t = torch.full((5,), float(rank + 1))
    if rank in (0, 2):
        dist.all_reduce(t, group=evens)
        assert torch.equal(t, torch.full((5,), 4.0)), t
    u = torch.full((3,), float(rank))
    if rank in (1, 2):
        dist.all_reduce(u, group=tail)
        assert torch.equal(u, torch.full((3,), 3.0)), u
        assert dist.get_rank(tail) == rank - 1
    w = torch.ones(2)
    dist.all_reduce(w)  # the world group still works after the subgroups
    assert torch.equal(w, torch.full((2,), 3.0))
    return True


def _bad_input_body(rank, size):
    messages = {}

    def expect(name, fn, error=(ValueError, RuntimeError)):
        try:
            fn()
        except error as e:
            messages[name] = str(e)
            return
        raise AssertionError(f"{name}: no error")

    expect("int16 reduction", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)))
    expect("bitwise op", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                                 op=dist.ReduceOp.BAND))
    expect("sparse", lambda: dist.all_reduce(torch.ones(3).to_sparse()))
    expect("wrong list length",
           lambda: dist.all_gather([torch.empty(3)] * (size + 1), torch.ones(3)))
    expect("wrong output size",
           lambda: dist.all_gather_into_tensor(torch.empty(5), torch.ones(3)))
    expect("bad splits",
           lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4),
                                          input_split_sizes=[1, 1], output_split_sizes=[2, 2]))
    expect("tag", lambda: dist.send(torch.ones(2), dst=(rank + 1) % size, tag=7))
    # the group still works after refused calls
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(size)))
    return messages


class Behaviour(unittest.TestCase):
    def test_async_futures_and_polling(self):
        run(2, _async_body)

    def test_wait_timeout_names_the_call_and_the_knob(self):
        took, message = run(2, _late_peer_body)[0]
        self.assertLess(took, 1.2, message)
        self.assertIn("all_reduce", message)
        self.assertIn("timeout", message)

    def test_blocked_rank_sleeps(self):
        cpu = run(2, _cpu_while_blocked_body)[0]
        # spinning would take ~2 s of CPU; the wait policy sleeps after 1 ms
        self.assertLess(cpu, 0.5, f"a rank blocked 2 s used {cpu:.2f} s of CPU")

    def test_dead_peer_raises_naming_it(self):
        values = run(3, _dead_peer_body, expect_failure_of=(1,), timeout_s=20, deadline_s=60)
        for r in (0, 2):
            took, message = values[r]
            self.assertLess(took, 20, message)
            self.assertIn("rank 1", message)

    def test_stalled_peer_times_out(self):
        values = run(2, _stalled_peer_body, timeout_s=2, deadline_s=60)
        took, message = values[0]
        self.assertLess(took, 5.0, message)
        self.assertGreater(took, 1.5, message)
        self.assertIn("TRNCCL_TIMEOUT", message)

    def test_subgroups(self):
        run(3, _subgroup_body)

    def test_tcp_store_rendezvous(self):
        # init_method tcp:// (a TCPStore) instead of the file store the other tests use
        run(3, _subgroup_body, init="tcp")

    def test_bad_input_is_refused_with_a_sentence(self):
        messages = run(2, _bad_input_body)[0]
        self.assertIn("torch.int16", messages["int16 reduction"])
        self.assertIn("BAND", messages["bitwise op"])
        self.assertIn("sparse", messages["sparse"])
        self.assertIn("tag 7", messages["tag"])
        self.assertIn("split", messages["bad splits"])


if __name__ == "__main__":
    unittest.main()

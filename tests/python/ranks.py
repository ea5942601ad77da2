"""Runs a test body on N real rank processes (forked), each with its own process group.

The body runs as body(rank, size, *args) after init_process_group(backend) over a FileStore in
a fresh directory; it may return a picklable value. run() returns {rank: value} or raises
AssertionError with every failing rank's traceback. A rank that hangs past the deadline is
killed and reported: a hang is a failure, never a stuck suite.
"""

import faulthandler
import multiprocessing
import os
import pickle
import queue
import signal
import socket
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

import trnccl.torch  # noqa: F401  (registers the backend)


def _child(rank, size, init_method, backend, body, args, results, env, timeout_s, deadline_s):
    status = (rank, False, "exited without a result")
    # A rank still running shortly before the deadline prints every thread's Python stack.
    faulthandler.dump_traceback_later(max(1.0, deadline_s - 3.0), exit=False)
    try:
        os.environ.update(env or {})
        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size,
                                timeout=__import__("datetime").timedelta(seconds=timeout_s))
        value = body(rank, size, *args)
        # Plain pickle puts tensors' bytes in the message (the queue's own pickler would share
        # them through a socket that dies with this process).
        status = (rank, True, pickle.dumps(value))
        dist.destroy_process_group()
    except BaseException:  # noqa: B902 - report everything, including SystemExit
        status = (rank, False, traceback.format_exc())
    results.put(status)
    results.close()
    results.join_thread()
    # Skip interpreter teardown (torch's atexit handlers can block a forked child).
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(size, body, *args, backend="trnccl", env=None, deadline_s=120, timeout_s=60,
        expect_failure_of=(), init="file"):
    """Runs body on `size` ranks; returns {rank: value}.

    init: "file" (a FileStore in a fresh directory) or "tcp" (a TCPStore on 127.0.0.1).

    expect_failure_of: ranks whose failure is expected (their traceback is returned as the
    value instead of raising).
    """
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="trnccl-pytest-") as directory:
        init_method = ("file://" + os.path.join(directory, "store") if init == "file"
                       else f"tcp://127.0.0.1:{_free_port()}")
        procs = [ctx.Process(target=_child,
                             args=(r, size, init_method, backend, body, args, results, env,
                                   timeout_s, deadline_s))
                 for r in range(size)]
        for p in procs:
            p.start()
        outcome = {}
        end = time.monotonic() + deadline_s
        while len(outcome) < size and time.monotonic() < end:
            try:
                rank, ok, value = results.get(timeout=0.2)
                outcome[rank] = (ok, value)
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
        for p in procs:
            p.join(timeout=max(0.0, end - time.monotonic()) if len(outcome) == size else 0)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                p.join()
    problems = []
    values = {}
    for r in range(size):
        if r not in outcome:
            if r in expect_failure_of:
                values[r] = f"no result (exit code {procs[r].exitcode})"
                continue
            problems.append(f"rank {r}: no result (hung past {deadline_s} s or died, "
                            f"exit code {procs[r].exitcode})")
            continue
        ok, value = outcome[r]
        if ok:
            value = pickle.loads(value)
        if ok or r in expect_failure_of:
            values[r] = value
        else:
            problems.append(f"rank {r} failed:\n{value}")
    if problems:
        raise AssertionError(f"{backend} job of {size} ranks:\n" + "\n".join(problems))
    return values

"""Run one function on forked ranks joined over torch.distributed gloo on localhost.

A rank that hangs in a collective is reported in ``hung`` once the deadline passes and is
killed, so the probe answers instead of holding the test; each rank's exception is
returned as its ``error`` (with a traceback tail), not raised.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta

import torch


def _rank_main(work: Callable[[int, dict], None], rank: int, world: int, port: int, timeout: float, queue) -> None:
    torch.set_num_threads(1)
    out: dict = {"error": None}
    store = None
    try:
        store = torch.distributed.TCPStore(
            "127.0.0.1", port, world, is_master=rank == 0, timeout=timedelta(seconds=timeout)
        )
        torch.distributed.init_process_group(
            "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout)
        )
        work(rank, out)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-2000:]
    queue.put((rank, out))
    if store is None:
        return
    if rank != 0:
        store.add("left", 1)
    elif out["error"] is None:
        # Rank 0 hosts the store: having finished, it stays until every rank that got this far
        # has left it, so that no peer still using the store is cut off. (A rank 0 that failed
        # leaves at once: peers waiting on it in a collective see its connections close.)
        end = time.monotonic() + timeout
        while store.add("left", 0) < world - 1 and time.monotonic() < end:
            time.sleep(0.01)


def run_ranks(work: Callable[[int, dict], None], world: int, timeout: float, deadline: float) -> dict:
    """``work(rank, out)`` on ``world`` forked ranks (gloo timeout ``timeout`` s); waits at most
    ``deadline`` s for them. Returns ``{"ranks": {rank: out}, "hung": [...], "seconds": ...}``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")  # work may be a closure: fork passes it without pickling
    queue = ctx.Queue()
    start = time.monotonic()
    procs = [ctx.Process(target=_rank_main, args=(work, r, world, port, timeout, queue)) for r in range(world)]
    for p in procs:
        p.start()
    ranks = {}
    end = start + deadline
    while len(ranks) < world and time.monotonic() < end:
        try:
            rank, out = queue.get(timeout=max(end - time.monotonic(), 0.1))
        except Exception:  # noqa: BLE001 - queue.Empty: the deadline passed
            break
        ranks[rank] = out
    for p in procs:
        p.join(timeout=1)
        if p.is_alive():
            p.kill()
            p.join()
    hung = [r for r in range(world) if r not in ranks]
    return {"ranks": ranks, "hung": hung, "seconds": time.monotonic() - start}

# SPDX-License-Identifier: Apache-2.0
"""One connector shared by threads: savers, loaders and a poller see every
completion exactly once with the right bytes; close racing with callers turns
them all away with ECC_ERR_CLOSED and waits for the transfers in flight."""

import threading
import time

import numpy as np
from conftest import pattern, poll_until

import ecc

BS = 1024
THREADS = 4
ROUNDS = 25


def run_all(targets):
    errors = []

    def guarded(fn):
        try:
            fn()
        except BaseException as e:  # reported by the test, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not [t for t in threads if t.is_alive()], "a thread hung"
    return errors


def when_room(call, *args):
    """Back-pressure: a refused flush keeps its queue and a refused load changes
    nothing, so the same call is made again once the poller has made room."""
    while True:
        try:
            return call(*args)
        except ecc.Busy:
            time.sleep(0.0005)


def collector(c, want, into, stop):
    def run():
        deadline = time.monotonic() + 20
        while len(into) < want and time.monotonic() < deadline and not stop.is_set():
            into.extend(c.poll())
            time.sleep(0.0002)
    return run


def test_savers_and_a_poller_share_a_connector(open_connector):
    c = open_connector(blocks=THREADS * ROUNDS)
    sources = {}
    for t in range(THREADS):
        for r in range(ROUNDS):
            sources[f"t{t}-r{r}"] = (pattern(BS, seed=t * 1000 + r), t * ROUNDS + r)

    def saver(t):
        def run():
            for r in range(ROUNDS):
                key = f"t{t}-r{r}"
                c.save(key, sources[key][0], [sources[key][1]])
                when_room(c.flush)
        return run

    done, stop = [], threading.Event()
    errors = run_all([saver(t) for t in range(THREADS)] +
                     [collector(c, THREADS * ROUNDS, done, stop)])
    assert not errors, errors
    assert sorted(d.key for d in done) == sorted(sources), "a save completed twice or never"
    assert all(d.ok for d in done) and c.pending == 0
    dsts = {k: np.zeros(BS, np.uint8) for k in sources}
    c.load_many([(i, [blk], dsts[k]) for i, (k, (_, blk)) in enumerate(sources.items())])
    poll_until(c, len(sources))
    assert all(np.array_equal(dsts[k], s) for k, (s, _) in sources.items())


def test_loaders_and_a_poller_share_a_connector(open_connector):
    c = open_connector(blocks=64)
    data = pattern(64 * BS, seed=3)
    c.save("all", data, list(range(64)))
    c.flush()
    poll_until(c, 1)
    dsts = {}

    def loader(t):
        def run():
            for r in range(ROUNDS):
                tid = t * ROUNDS + r
                dsts[tid] = np.zeros(BS, np.uint8)
                when_room(c.load, tid, [tid % 64], dsts[tid])
        return run

    done, stop = [], threading.Event()
    errors = run_all([loader(t) for t in range(THREADS)] +
                     [collector(c, THREADS * ROUNDS, done, stop)])
    assert not errors, errors
    assert sorted(d.transfer_id for d in done) == list(range(THREADS * ROUNDS))
    for tid, dst in dsts.items():
        b = tid % 64
        assert np.array_equal(dst, data[b * BS:(b + 1) * BS]), f"transfer {tid}"


def test_close_racing_with_callers(open_connector):
    # No two copies may write the same bytes at once (the region's blocks are
    # the caller's to keep apart): each thread saves its own blocks, one save
    # per flush, and one batch is in flight at a time.
    per_thread = 64 // THREADS
    c = open_connector(block_size=64 * 1024, blocks=64, **{"connector.max_inflight": "1"})
    big = pattern(per_thread * 64 * 1024, seed=1)
    started = threading.Barrier(THREADS + 1)

    def hammer(t):
        blocks = list(range(t * per_thread, (t + 1) * per_thread))

        def run():
            started.wait()
            try:
                while True:
                    c.save(f"k{t}", big, blocks)
                    while True:
                        try:
                            c.flush()
                            break
                        except ecc.Busy:
                            c.poll()  # back-pressure: polling makes room
                    c.poll()
                    c.stats()
            except ecc.EccError as e:
                assert e.code == ecc.ECC_ERR_CLOSED, e
        return run

    def closer():
        started.wait()
        time.sleep(0.05)
        c.close()

    errors = run_all([hammer(t) for t in range(THREADS)] + [closer])
    assert not errors, errors
    assert c.closed and c.pending == 0

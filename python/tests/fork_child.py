# SPDX-License-Identifier: Apache-2.0
"""The process test_fork.py runs: it opens a connector, forks while another of
its threads is inside a call (or holds the client's locks, or polls in a loop),
and prints one JSON line on what the children could do and how long they took.

Usage: fork_child.py MODE INI OVERRIDES_JSON   (MODE: inside, locks, loop)
FORK_REPORT names the file a child reports through; FORK_OWN=0 keeps the
children from opening connectors of their own (their threads would be new
threads of a child forked from a threaded process)."""

import json
import multiprocessing
import os
import sys
import threading
import time
import warnings

import ecc
from ecc import _lib

BS = 1024
CHILD_DEADLINE_S = 5.0
OWN = os.environ.get("FORK_OWN", "1") == "1"
warnings.filterwarnings("ignore", "This process", DeprecationWarning)  # fork with threads


def wait_child(pid, deadline_s=CHILD_DEADLINE_S):
    """(exit status, seconds), or ("hung", seconds) after killing a child that
    did not exit in time."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - t0
        time.sleep(0.005)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung", time.monotonic() - t0


def refusals(c):
    """What each call of the inherited connector raised in the child."""
    buf, dst = bytearray(BS), bytearray(BS)
    calls = {
        "save": lambda: c.save("k", buf, [1]), "flush": c.flush,
        "load": lambda: c.load(1, [0], dst),
        "poll": c.poll, "stats": c.stats, "describe": c.describe,
        "reserve": lambda: c.reserve("k", BS), "lookup": lambda: c.lookup("k"),
        "unpin": lambda: c.unpin(1), "remove": lambda: c.remove("k"), "list": c.list,
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "returned"
        except ecc.EccError as e:
            out[name] = [e.code.name, e.message]
    return out


def drain(c, want=1):
    done = []
    while len(done) < want:
        done += c.poll()
        time.sleep(0.001)
    return done


def publish(c, key, data):
    c.save_reserved(c.reserve(key, len(data)), bytearray(data))
    c.flush()
    drain(c)


def read(c, key, transfer_id):
    (hit,) = c.lookup(key)
    dst = bytearray(hit.nbytes)
    c.load_pinned(transfer_id, hit, dst)
    drain(c)
    return bytes(dst)


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def child_of_inside(c, ini, overrides, expected):
    """In the child: the inherited connector refuses, closes at once, and a
    connector of the child's own reads what the parent saved."""
    report = {"pid": os.getpid(), "closed_before": c.closed, "refusals": refusals(c)}
    report["pending_s"] = timed(lambda: c.pending)
    report["close_s"] = timed(c.close)
    report["close_again_s"] = timed(c.close)
    if OWN:
        with ecc.Connector(ini, overrides) as own:
            report["own_reads_parent_bytes"] = read(own, "parent", 1) == expected
    with open(os.environ["FORK_REPORT"], "w") as f:
        json.dump(report, f)
    sys.exit(0)  # the interpreter's exit runs the finalizers, where a hang would show


def mode_inside(ini, overrides):
    """A worker thread is inside save_reserved (held in the log callback) at fork."""
    in_call, release = threading.Event(), threading.Event()

    def log(level, message):
        if threading.current_thread().name == "worker":
            in_call.set()
            release.wait(30)

    c = ecc.Connector(ini, overrides, log=log)
    expected = bytes(range(256)) * (BS // 256)
    publish(c, "parent", expected)

    def worker():
        try:
            c.save_reserved(999, bytearray(BS))  # a token that names nothing: logged, refused
        except ecc.EccError:
            pass

    t = threading.Thread(target=worker, name="worker")
    t.start()
    assert in_call.wait(10), "the worker never reached the log callback"
    pid = os.fork()
    if pid == 0:
        child_of_inside(c, ini, overrides, expected)
    status, seconds = wait_child(pid)
    release.set()
    t.join(10)
    result = {"parent": os.getpid(), "child_status": status, "child_s": seconds,
              "parent_reads_its_bytes": read(c, "parent", 2) == expected,
              "parent_close_s": timed(c.close)}
    if status == 0:
        with open(os.environ["FORK_REPORT"]) as f:
            result["child"] = json.load(f)
    return result


def mode_locks(ini, overrides):
    """A parent thread holds every lock of the client at fork."""
    c = ecc.Connector(ini, overrides)
    core = c._core
    locks = [core.submit, core.pending._lock, _lib._lock] + [getattr(core, "closer", None)]
    taken, release = threading.Event(), threading.Event()

    def holder():
        for lock in filter(None, locks):
            lock.acquire()
        taken.set()
        release.wait(30)
        for lock in filter(None, locks):
            lock.release()

    t = threading.Thread(target=holder)
    t.start()
    assert taken.wait(10)
    pid = os.fork()
    if pid == 0:
        report = {"pending_s": timed(lambda: c.pending), "close_s": timed(c.close)}
        if OWN:
            report["open_s"] = timed(lambda: ecc.Connector(ini, overrides).close())
        with open(os.environ["FORK_REPORT"], "w") as f:
            json.dump(report, f)
        sys.exit(0)
    status, seconds = wait_child(pid)
    release.set()
    t.join(10)
    result = {"child_status": status, "child_s": seconds, "parent_close_s": timed(c.close)}
    if status == 0:
        with open(os.environ["FORK_REPORT"]) as f:
            result["child"] = json.load(f)
    return result


def mp_worker(c):
    """A multiprocessing worker given the parent's connector."""
    try:
        c.stats()
        sys.exit(2)
    except ecc.EccError as e:
        if e.code != ecc.ECC_ERR_CLOSED:
            sys.exit(3)
    c.close()


def mode_loop(ini, overrides, forks=8, workers=3):
    """Children forked, and multiprocessing workers started with the fork method,
    while a thread polls in a loop; the children leave through the normal exit."""
    c = ecc.Connector(ini, overrides)
    stop = threading.Event()

    def poller():
        while not stop.is_set():
            c.poll()
            c.stats()

    t = threading.Thread(target=poller)
    t.start()
    forked = []
    for _ in range(forks):
        time.sleep(0.002)
        pid = os.fork()
        if pid == 0:
            try:
                c.stats()
                os._exit(2)
            except ecc.EccError as e:
                if e.code != ecc.ECC_ERR_CLOSED:
                    os._exit(3)
            sys.exit(0)
        forked.append(wait_child(pid))
    ctx = multiprocessing.get_context("fork")
    pool = []
    for _ in range(workers):
        time.sleep(0.002)
        p = ctx.Process(target=mp_worker, args=(c,))
        p.start()
        pool.append(p)
    mp = []
    for p in pool:
        p.join(CHILD_DEADLINE_S)
        if p.is_alive():
            p.kill()
            p.join()
            mp.append("hung")
        else:
            mp.append(p.exitcode)
    stop.set()
    t.join(10)
    return {"forked": [s for s, _ in forked], "forked_max_s": max(s for _, s in forked),
            "mp": mp, "parent_close_s": timed(c.close)}


def main():
    mode, ini, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    run = {"inside": mode_inside, "locks": mode_locks, "loop": mode_loop}[mode]
    print(json.dumps(run(ini, overrides)), flush=True)


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C at any moment of a call: a process runs a loop of calls while SIGINTs
arrive at random moments, each a KeyboardInterrupt wherever it lands; afterwards
no call is counted inside, the connector works from another thread, close()
returns at once, and every connector opened in the loop is closed by the exit.
A close that Ctrl-C stops while it waits for a call is finished by the next.

By hand, with more signals: python3 python/tests/test_interrupt.py 3000 [PYTHON]"""

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import PYTHON_DIR, region_overrides, write_ini

import ecc

SIGNALS = 300


def interrupt(ini, overrides, signals, python=sys.executable, seed=None, timeout=60):
    """The child's report after `signals` SIGINTs 0.2-3 ms apart."""
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    # A file, not a pipe: interrupts in finalizers are printed there, and a
    # full pipe would stop the child.
    with tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen([python, str(PYTHON_DIR / "tests" / "interrupt_child.py"),
                                  str(ini), json.dumps(overrides)], env=env,
                                 stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            assert child.stdout.readline().strip() == "ready", "the child did not start"
            for _ in range(signals):
                time.sleep(rng.uniform(0.0002, 0.003))
                os.kill(child.pid, signal.SIGINT)
            time.sleep(0.01)
            os.kill(child.pid, signal.SIGUSR1)
            out, _ = child.communicate(timeout=timeout)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
            stderr.seek(0)
            err = stderr.read()
    assert child.returncode == 0, f"exit {child.returncode} (a hang ends with the stacks):\n{err}"
    report = json.loads(out.splitlines()[-1])
    report["regions_after_exit"] = sorted(os.listdir(overrides["region.dir"]))
    return report, err


def check(report, signals):
    assert report["caught"] > signals // 4, report  # most land in the calls
    assert not report.get("errors"), report["errors"]
    assert report["inside_after"] == 0, "a call is still counted inside"
    assert not report["round_trip_hung"], "another thread blocked on a lock or the count"
    assert report["round_trip_ok"], "the bytes loaded after the interrupts differ"
    assert report["close_s"] < 1.0, f"close took {report['close_s']:.2f} s"
    assert report["regions_after_exit"] == [], "a connector opened in the loop stayed open"


def test_sigints_at_random_moments_leave_the_connector_usable(region_dir, ini):
    report, _ = interrupt(ini, region_overrides(region_dir, blocks=64), SIGNALS)
    check(report, SIGNALS)


@contextlib.contextmanager
def ctrl_c_after(seconds):
    """SIGINT to the main thread after `seconds` unless the block has ended
    (never into a later test)."""
    armed = threading.Event()

    def fire():
        if armed.is_set():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    timer = threading.Timer(seconds, fire)
    armed.set()
    timer.start()
    try:
        yield
    finally:
        armed.clear()
        timer.cancel()


def test_an_interrupted_wait_for_a_lock_leaves_it_to_its_holder():
    from ecc._guard import held

    lock, taken, release, errors = threading.RLock(), threading.Event(), threading.Event(), []

    def holder():
        lock.acquire()
        taken.set()
        release.wait(5)
        try:
            lock.release()
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=holder)
    t.start()
    assert taken.wait(5)
    with ctrl_c_after(0.1), pytest.raises(KeyboardInterrupt):
        held(lock, lambda: None)  # the KeyboardInterrupt, not release()'s RuntimeError
    release.set()
    t.join(5)
    assert not errors, "the interrupted waiter released the holder's lock"
    assert lock.acquire(blocking=False)
    lock.release()


def test_an_interrupted_close_is_finished_by_the_next(open_connector, region_dir):
    """Ctrl-C while close waits for another thread's call: the next close shuts
    the connector down (its region file goes) instead of returning at once."""
    in_call, release = threading.Event(), threading.Event()

    def log(level, message):
        if threading.current_thread().name == "worker":
            in_call.set()
            release.wait(10)

    def refused_call():
        with pytest.raises(ecc.EccError):
            c.save_reserved(999, bytearray(16))  # a token naming nothing: logged

    c = open_connector(log=log, directory=True, name="closing")
    worker = threading.Thread(target=refused_call, name="worker")
    worker.start()
    assert in_call.wait(5)
    with ctrl_c_after(0.1), pytest.raises(KeyboardInterrupt):
        c.close()  # waits for the worker's call, which the log callback holds
    release.set()
    worker.join(5)
    assert (region_dir / "ecc-closing.region").exists()
    t0 = time.monotonic()
    c.close()
    assert time.monotonic() - t0 < 1.0
    assert c.closed and not (region_dir / "ecc-closing.region").exists(), \
        "the second close did not shut the connector down"


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else SIGNALS
    python = sys.argv[2] if len(sys.argv) > 2 else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        region = Path(tmp) / "region"
        region.mkdir(mode=0o700)
        t0 = time.monotonic()
        report, err = interrupt(write_ini(Path(tmp) / "ecc.ini"),
                                region_overrides(region, blocks=64), n, python=python, timeout=600)
        report["seconds"] = round(time.monotonic() - t0, 1)
        report["stderr_lines"] = len(err.splitlines())
        print(json.dumps(report))
        check(report, n)

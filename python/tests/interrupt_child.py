# SPDX-License-Identifier: Apache-2.0
"""The process test_interrupt.py interrupts: its main thread runs a loop of
calls (save, flush, load, poll, stats, describe, and now and then a connector
opened and closed) while another thread polls, and takes each SIGINT that the
test sends as a KeyboardInterrupt wherever it lands, as Ctrl-C does. On SIGUSR1
it checks that the connector still works from another thread and that close()
returns, then prints one JSON line.

Usage: interrupt_child.py INI OVERRIDES_JSON   (needs only the ecc package)"""

import faulthandler
import gc
import json
import signal
import sys
import threading
import time

import ecc
from ecc import connector

BS = 1024
KEYS = 8
HANG_S = 10  # faulthandler ends the process with its stacks after this long
stop = False
landed = {"caught": 0, "in_harness": 0, "raised_in": {}}


def one_round(c, i, src, dst, opened):
    c.save(f"k{i % KEYS}", src, [i % KEYS])
    try:
        c.flush()
    except ecc.Busy:
        pass
    c.poll()
    try:
        c.load(i, [i % KEYS], dst)
    except ecc.Busy:
        pass
    c.poll()
    c.stats()
    c.describe()
    if i % 16 == 0:
        opened(i).close()


def harness(c, opened):
    src, dst = bytearray(b"\x5a" * BS), bytearray(BS)
    i = 0
    while not stop:
        try:
            while not stop:
                i += 1
                one_round(c, i, src, dst, opened)
        except KeyboardInterrupt:
            landed["caught"] += 1
        except ecc.EccError as e:  # an interrupt must never turn into a refusal
            landed.setdefault("errors", []).append(str(e))


SKIP = {harness.__code__}


def on_sigint(signum, frame):
    """Ctrl-C's KeyboardInterrupt, except in the harness's own loop, where no
    try could catch it (the frame is where the signal landed)."""
    code = frame.f_code
    if code in SKIP:
        landed["in_harness"] += 1
        return
    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"
    landed["raised_in"][where] = landed["raised_in"].get(where, 0) + 1
    raise KeyboardInterrupt


def on_sigusr1(signum, frame):
    global stop
    stop = True
    faulthandler.dump_traceback_later(HANG_S, exit=True)  # a hang from here on fails


SKIP.add(on_sigint.__code__)
SKIP.add(on_sigusr1.__code__)


def round_trip(c, report):
    """From a thread of its own: a lock or a count an interrupt left behind
    would block it."""
    data = bytes(range(256)) * (BS // 256)
    dst = bytearray(BS)
    report["round_trip_ok"] = False
    try:
        while c.poll():
            pass
        c.save("check", bytearray(data), [KEYS])
        c.flush()
        c.load(10**9, [KEYS], dst)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if any(d.transfer_id == 10**9 for d in c.poll()):
                break
            time.sleep(0.001)
        report["round_trip_ok"] = bytes(dst) == data
    except ecc.EccError as e:
        report["round_trip_error"] = str(e)


def main():
    ini, overrides = sys.argv[1], json.loads(sys.argv[2])
    base = overrides["region.name"]

    def opened(i):
        return ecc.Connector(ini, dict(overrides, **{"region.name": f"{base}-{i}"}))

    c = ecc.Connector(ini, overrides)
    poller_stop = threading.Event()

    def poller():
        while not poller_stop.is_set():
            c.stats()
            time.sleep(0.0001)

    t = threading.Thread(target=poller)
    t.start()
    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGUSR1, on_sigusr1)
    print("ready", flush=True)
    harness(c, opened)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    poller_stop.set()
    t.join()
    report = dict(landed)
    report["inside_after"] = len(c._core.guard.inside)
    checker = threading.Thread(target=round_trip, args=(c, report))
    checker.start()
    checker.join(HANG_S)
    report["round_trip_hung"] = checker.is_alive()
    t0 = time.monotonic()
    c.close()
    report["close_s"] = time.monotonic() - t0
    gc.collect()
    # Connectors whose finalizer a second interrupt stopped (it is printed, not
    # raised, in a finalizer): closed at exit, which the test checks.
    report["open_until_exit"] = sum(1 for core in connector._unclosed if core.handle.value)
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

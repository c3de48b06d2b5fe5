# SPDX-License-Identifier: Apache-2.0
"""Waiting without spinning: wait() sleeps until the completions it names are
polled and keeps every other one for the next poll; poll(timeout=) waits for
at least one; while they wait, the process uses a small part of a core."""

import time

import numpy as np
import pytest
from conftest import pattern

import ecc

BS = 1024


def save(c, key, seed):
    r = c.reserve(key, 4 * BS)
    c.save_reserved(r, pattern(4 * BS, seed))
    c.flush()
    return r


def test_wait_returns_what_it_names_and_keeps_the_rest_for_poll(open_connector):
    c = open_connector(directory=True, blocks=64)
    save(c, "a", 1)
    save(c, "b", 2)
    got = c.wait("b", timeout=10)
    assert [(d.direction, d.key) for d in got] == [("save", "b")] and got[0].ok
    (hit,) = c.lookup("a")
    dst = np.empty(4 * BS, np.uint8)
    c.load_pinned(7, hit, dst)
    got = c.wait([7], timeout=10)
    assert [(d.direction, d.transfer_id) for d in got] == [("load", 7)]
    assert (dst == pattern(4 * BS, 1)).all()
    assert [(d.direction, d.key) for d in c.poll()] == [("save", "a")]  # kept, then given once
    assert c.poll() == []


def test_a_wait_that_times_out_sleeps_and_keeps_what_it_saw(open_connector):
    c = open_connector(directory=True, blocks=64)
    save(c, "seen", 3)
    t0, cpu0 = time.monotonic(), time.process_time()
    with pytest.raises(TimeoutError, match="1 not completed within 0.5 s: \\[\"\\('save', b'never'\\)"):
        c.wait(["never"], timeout=0.5)
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    assert 0.45 <= wall < 5 and cpu < 0.25 * wall, (wall, cpu)
    assert [d.key for d in c.poll()] == ["seen"]


def test_poll_with_a_timeout_waits_for_one_and_sleeps_meanwhile(open_connector):
    c = open_connector(directory=True, blocks=64)
    t0, cpu0 = time.monotonic(), time.process_time()
    assert c.poll(timeout=0.3) == []
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    assert 0.28 <= wall < 5 and cpu < 0.25 * wall, (wall, cpu)
    save(c, "x", 4)
    assert [d.key for d in c.poll(timeout=10)] == ["x"]
    with pytest.raises(ecc.EccError, match="timeout must be seconds >= 0 or None"):
        c.poll(timeout=-1)
    with pytest.raises(TypeError, match="a transfer id \\(int\\) or a key"):
        c.wait([1.5])

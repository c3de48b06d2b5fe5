# SPDX-License-Identifier: Apache-2.0
"""A producer and a consumer in two Python processes (examples/producer.py piped
into examples/consumer.py) sharing one region through its directory; a second
producer finds the entries already there; a consumer refuses bytes that differ."""

import os
import subprocess
import sys

from conftest import REPO

import ecc
from ecc import EntryState

PRODUCER = str(REPO / "examples" / "producer.py")
CONSUMER = str(REPO / "examples" / "consumer.py")


def overrides(region_dir):
    return {"region.dir": str(region_dir), "region.require_tmpfs": "false",
            "region.size": "48MiB", "region.name": f"pipe{os.getpid()}"}


def argv(o):
    return [f"{k}={v}" for k, v in o.items()]


def pipeline(o, timeout=60):
    producer = subprocess.Popen([sys.executable, PRODUCER, *argv(o)], stdout=subprocess.PIPE)
    consumer = subprocess.run([sys.executable, CONSUMER, *argv(o)], stdin=producer.stdout,
                              capture_output=True, text=True, timeout=timeout)
    producer.stdout.close()
    assert producer.wait(timeout) == 0
    return consumer


def test_a_producer_and_a_consumer_process_share_the_directory(region_dir):
    o = overrides(region_dir)
    # This process holds the region too, so that the second run finds the first's entries.
    with ecc.Connector(REPO / "conf" / "default.ini", dict(o, **{"engine.type": "host"})) as c:
        first = pipeline(o)
        assert first.returncode == 0, first.stderr
        assert "consumer: 8 entries" in first.stdout and "every byte as saved" in first.stdout
        listed = {e.key: e for e in c.list()}
        assert sorted(listed) == [f"image-{i}" for i in range(8)]
        assert all(e.state == EntryState.READY and e.pins == 0 for e in listed.values())
        second = pipeline(o)
        assert second.returncode == 0, second.stderr
        d = c.stats().directory
        assert (d.reservations, d.dedup_hits, d.hits) == (8, 8, 16)
    assert not (region_dir / f"ecc-pipe{os.getpid()}.region").exists()


def test_the_consumer_refuses_bytes_that_differ(region_dir):
    o = overrides(region_dir)
    producer = subprocess.Popen([sys.executable, PRODUCER, *argv(o)], stdout=subprocess.PIPE,
                                text=True)
    consumer = subprocess.Popen([sys.executable, CONSUMER, *argv(o)], stdin=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    for i, line in enumerate(producer.stdout):
        key, nbytes, crc = line.split()
        if i == 7:  # the last: the consumer has looked every key up, the producer may go
            lied, crc = key, int(crc) ^ 1
        consumer.stdin.write(f"{key} {nbytes} {crc}\n")
        consumer.stdin.flush()
    consumer.stdin.close()
    assert producer.wait(60) == 0 and consumer.wait(60) == 1
    assert f"{lied}: the loaded bytes differ" in consumer.stderr.read()

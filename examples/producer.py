#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A producer through the region's directory: reserves each encoder output by key,
saves it, and prints "key nbytes crc32" once it is published.

    examples/producer.py [CONFIG] [section.key=value ...] | examples/consumer.py [same]

CONFIG defaults to conf/default.ini; the host engine is used unless overridden."""

import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))  # the client of this checkout, like the build tree's
import ecc  # noqa: E402

IMAGES, HIDDEN = 8, 1536


def arguments(argv, role):
    config = argv[0] if argv and "=" not in argv[0] else ROOT / "conf" / "default.ini"
    pairs = dict(a.split("=", 1) for a in argv if "=" in a)
    return config, {"connector.role": role, "engine.type": "host", **pairs}


def encoder_output(i):
    """Stands in for the vision encoder: one float16 row of HIDDEN per token."""
    rows = 600 + 40 * i
    return np.random.default_rng(i).standard_normal((rows, HIDDEN)).astype(np.float16)


def publish(c, key, out):
    """Reserve, save, flush, and poll until the save is done (then lookups find it)."""
    while True:
        try:
            entry = c.reserve(key, out.nbytes)
            break
        except ecc.Busy:  # no room: every entry is pinned by a reader for now
            time.sleep(0.01)
    if entry.state != ecc.EntryState.RESERVED:
        return  # READY or being written by another producer: no need to encode
    c.save_reserved(entry, out)
    c.flush()
    while not any(done.key == key and done.ok for done in c.poll()):
        time.sleep(0.001)


def main(argv):
    config, overrides = arguments(argv, "producer")
    with ecc.Connector(config, overrides) as c:
        for i in range(IMAGES):
            out = encoder_output(i)
            publish(c, f"image-{i}", out)
            print(f"image-{i} {out.nbytes} {zlib.crc32(out)}", flush=True)
        # The last process to close a region removes it: stay until the
        # consumer has found every entry (it holds the region from then on).
        deadline = time.monotonic() + 60
        while c.stats().directory.hits < IMAGES and time.monotonic() < deadline:
            time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

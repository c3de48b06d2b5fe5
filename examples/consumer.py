#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A consumer through the region's directory: for each "key nbytes crc32" line on
stdin, looks the key up, loads the pinned entry and checks its bytes.

    examples/producer.py [CONFIG] [section.key=value ...] | examples/consumer.py [same]"""

import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))  # the client of this checkout, like the build tree's
import ecc  # noqa: E402


def arguments(argv, role):
    config = argv[0] if argv and "=" not in argv[0] else ROOT / "conf" / "default.ini"
    pairs = dict(a.split("=", 1) for a in argv if "=" in a)
    return config, {"connector.role": role, "engine.type": "host", **pairs}


def fetch(c, key, transfer_id):
    """Look the key up (a pin), load it, and poll until the load is done."""
    (entry,) = c.lookup(key)
    if entry.state != ecc.EntryState.READY:
        raise SystemExit(f"consumer: {key} is not in the directory")
    dst = np.empty(entry.nbytes, np.uint8)
    c.load_pinned(transfer_id, entry, dst)  # the polled completion releases the pin
    while not any(done.transfer_id == transfer_id and done.ok for done in c.poll()):
        time.sleep(0.001)
    return dst


def main(argv):
    config, overrides = arguments(argv, "consumer")
    entries = total = 0
    with ecc.Connector(config, overrides) as c:
        for transfer_id, line in enumerate(sys.stdin, start=1):
            key, nbytes, crc = line.split()
            data = fetch(c, key, transfer_id)
            if data.nbytes != int(nbytes) or zlib.crc32(data) != int(crc):
                print(f"consumer: {key}: the loaded bytes differ from the saved ones",
                      file=sys.stderr)
                return 1
            entries, total = entries + 1, total + data.nbytes
    print(f"consumer: {entries} entries, {total} bytes, every byte as saved")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

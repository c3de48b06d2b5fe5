# SPDX-License-Identifier: Apache-2.0
"""What every test of the client shares: the package from this source tree, a
private region directory per test (mode 0700; not a tmpfs, so require_tmpfs is
turned off), connectors opened on it with the host engine, and polling helpers."""

import itertools
import os
import sys
import time
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))

import ecc  # noqa: E402  (the source tree's package, whatever is installed)

_names = itertools.count()


def write_ini(path, text="[plugin]\nname = shm\nlog_level = error\n"):
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def region_dir(tmp_path):
    d = tmp_path / "region"
    d.mkdir(mode=0o700)
    d.chmod(0o700)
    return d


@pytest.fixture
def ini(tmp_path):
    return write_ini(tmp_path / "ecc.ini")


def region_overrides(region_dir, name=None, block_size=1024, blocks=256, role="both",
                     directory=False, **extra):
    o = {
        "region.dir": str(region_dir),
        "region.require_tmpfs": "false",
        "region.name": name or f"py{os.getpid()}-{next(_names)}",
        "region.block_size": str(block_size),
        "region.size": str(block_size * blocks),
        "engine.type": "host",
        "connector.role": role,
        "directory.enabled": "true" if directory else "false",
    }
    o.update(extra)
    return o


@pytest.fixture
def open_connector(ini, region_dir):
    """open_connector(**region_overrides args) -> an open Connector, closed after."""
    opened = []

    def make(log=None, **kw):
        c = ecc.Connector(ini, region_overrides(region_dir, **kw), log=log)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


def poll_until(c, want, timeout=5.0):
    """Poll until `want` completions arrived; fails the test after `timeout` s."""
    done = []
    deadline = time.monotonic() + timeout
    while len(done) < want:
        done += c.poll()
        if time.monotonic() > deadline:
            pytest.fail(f"{len(done)} of {want} completions after {timeout} s: {done}")
        if len(done) < want:
            time.sleep(0.0005)
    return done


def pattern(nbytes, seed):
    """Bytes that differ per seed and position (never all zero)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return rng.integers(1, 256, size=nbytes, dtype=np.uint8)

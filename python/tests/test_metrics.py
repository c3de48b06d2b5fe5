# SPDX-License-Identifier: Apache-2.0
"""ecc.metrics.Collector through a prometheus_client registry: the bytes,
seconds, transfers and size buckets of each direction, and the directory's
occupancy, hits, misses and evictions, as a scrape reads them."""

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import pattern, poll_until, write_ini

import ecc

prometheus_client = pytest.importorskip("prometheus_client",
                                        reason="prometheus_client is not installed")

from ecc.metrics import Collector  # noqa: E402

KIB = 1024


def scrape(c, prefix="ecc"):
    registry = prometheus_client.CollectorRegistry()
    registry.register(Collector(c, prefix=prefix))
    return registry.get_sample_value


def test_each_direction_exports_bytes_seconds_transfers_and_sizes(open_connector):
    c = open_connector(block_size=64 * KIB, blocks=64)
    c.save("small", pattern(100, 1), [0])
    c.flush()
    c.save("medium", pattern(600_000, 2), list(range(1, 11)))
    c.flush()
    poll_until(c, 2)
    c.load(1, list(range(1, 11)), np.zeros(600_000, np.uint8))
    poll_until(c, 1)
    value = scrape(c)
    assert value("ecc_save_bytes_total") == 600_100
    assert value("ecc_save_transfers_total") == 2 and value("ecc_save_entries_total") == 2
    assert value("ecc_save_time_seconds_total") == pytest.approx(c.stats().save.busy_ns * 1e-9)
    assert value("ecc_save_size_bytes_bucket", {"le": "500000.0"}) == 1
    assert value("ecc_save_size_bytes_bucket", {"le": "1000000.0"}) == 2
    assert value("ecc_save_size_bytes_bucket", {"le": "250000000.0"}) == 2
    assert value("ecc_save_size_bytes_bucket", {"le": "+Inf"}) == 2
    assert value("ecc_save_size_bytes_count") == 2 and value("ecc_save_size_bytes_sum") == 600_100
    assert value("ecc_load_bytes_total") == 600_000 and value("ecc_load_transfers_total") == 1
    assert value("ecc_load_size_bytes_bucket", {"le": "500000.0"}) == 0
    assert value("ecc_load_size_bytes_bucket", {"le": "1000000.0"}) == 1
    assert value("ecc_load_failed_transfers_total") == 0


def test_the_directory_exports_occupancy_hits_misses_and_evictions(open_connector):
    c = open_connector(directory=True, block_size=KIB, blocks=64)
    for i in range(5):  # the fifth evicts one of the first four
        r = c.reserve(f"k{i}", 16 * KIB)
        c.save_reserved(r.token, pattern(16 * KIB, i))
        c.flush()
        poll_until(c, 1)
    found = c.lookup(["k4", "absent"])
    c.unpin(found[0].token)
    value = scrape(c, prefix="enc")
    assert value("enc_directory_entries") == 4
    assert value("enc_directory_blocks_used") == 64 and value("enc_directory_occupancy") == 1.0
    assert value("enc_directory_hits_total") == 1 and value("enc_directory_misses_total") == 1
    assert value("enc_directory_evictions_total") == 1
    assert value("enc_directory_reservations_total") == 5


def test_a_closed_connector_exports_nothing(open_connector):
    c = open_connector()
    registry = prometheus_client.CollectorRegistry()
    registry.register(Collector(c))
    c.close()
    assert registry.get_sample_value("ecc_save_bytes_total") is None
    assert b"ecc_" not in prometheus_client.generate_latest(registry)


def _families(text):
    """{name: type} of the '# TYPE' lines of an exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            out[name] = kind
    return out


def test_eccctl_metrics_serves_the_collector_families_and_promtool_accepts_them(
        tmp_path, region_dir):
    eccctl = os.environ.get("ECCCTL")
    if not eccctl:
        pytest.skip("ECCCTL (the eccctl program of this build) is not set")
    ini = write_ini(tmp_path / "full.ini", "[plugin]\nname = shm\nlog_level = error\n"
                    f"[region]\nname = metrics{os.getpid()}\ndir = {region_dir}\n"
                    "require_tmpfs = false\nblock_size = 1024\nsize = 64KiB\n"
                    "[engine]\ntype = host\n[directory]\nenabled = true\n")
    with ecc.Connector(ini) as c:
        r = c.reserve("k", 4 * KIB, cost_us=2_500_000)
        c.save_reserved(r.token, pattern(4 * KIB, 1))
        c.flush()
        poll_until(c, 1)
        c.unpin(c.lookup(["k"])[0].token)
        env = dict(os.environ, ECC_PLUGIN_DIR=str(Path(os.environ["ECC_HOST_LIBRARY"]).parent
                                                   / "ecc"))
        text = subprocess.run([eccctl, "metrics", str(ini)], check=True, capture_output=True,
                              text=True, env=env, timeout=30).stdout
        registry = prometheus_client.CollectorRegistry()
        registry.register(Collector(c))
        mine = prometheus_client.generate_latest(registry).decode()
    assert _families(text) == _families(mine)
    assert "ecc_cache_encoder_seconds_saved_total 2.5" in text
    assert "ecc_directory_used_bytes 4096" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool not installed: the lint of the exposition was not run")
        return
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr

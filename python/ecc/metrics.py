# SPDX-License-Identifier: Apache-2.0
"""A prometheus_client collector over Connector.stats(): per direction the bytes,
seconds, transfers and a size histogram with upstream's 0.5-250 MB buckets, the
directory's occupancy, hits, misses and evictions, and the cache's waits and
encoder seconds saved. Needs prometheus_client. `eccctl metrics` serves the same
families to Prometheus from C (host-shim/cli/metrics.c)."""

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ._abi import HIST_BOUNDS
from .errors import EccError
from .records import CacheStats, DirectoryStats, DirStats, Stats

# (name suffix, DirStats field, scale, help)
DIRECTION_COUNTERS = (
    ("bytes", "bytes", 1, "Bytes moved"),
    ("time_seconds", "busy_ns", 1e-9, "Seconds the batched transfers took, summed"),
    ("transfers", "transfers", 1, "Batched transfers completed"),
    ("entries", "entries", 1, "Entries (keys or transfer ids) completed"),
    ("descriptors", "descriptors", 1, "Copy descriptors after coalescing"),
    ("failed_transfers", "failed", 1, "Batched transfers that ended with an error"),
)
DIRECTORY_GAUGES = (
    ("entries", "Entries reserved or ready"),
    ("blocks_used", "Blocks of those entries"),
    ("blocks_free", "Blocks of no entry"),
    ("largest_free_run", "Longest run of free blocks"),
    ("pins_live", "Pins not yet released"),
)
DIRECTORY_COUNTERS = (
    ("reservations", "reserve calls that reserved"),
    ("dedup_hits", "reserve calls that found the key ready or being written"),
    ("lookups", "Keys looked up"),
    ("hits", "Keys looked up and found ready"),
    ("misses", "Keys looked up and not found ready"),
    ("evictions", "Entries evicted to make room"),
    ("removals", "Entries removed by key"),
    ("reclaimed", "Reservations and pins of dead processes freed"),
    ("full", "reserve calls refused for want of room"),
)

# (field, scale, name suffix, help): the cache's counters of ABI 1.2.
CACHE_COUNTERS = (
    ("waits", 1, "waits", "wait_ready calls that found the key being written"),
    ("waits_ready", 1, "waits_ready", "Waits that ended with the entry ready"),
    ("waits_absent", 1, "waits_absent", "Waits that ended absent: the writer aborted or died"),
    ("wait_timeouts", 1, "wait_timeouts", "Waits that ended with their timeout"),
    ("encoder_us_saved", 1e-6, "encoder_seconds_saved",
     "Encoder seconds the hits saved, by their cost"),
    ("events", 1, "events", "Residency events written"),
    ("restarts", 1, "restarts", "Opens that reused a kept region"),
)

_ZERO_DIR = DirStats(0, 0, 0, 0, 0, 0, (0,) * (len(HIST_BOUNDS) + 1))
_ZERO = Stats(_ZERO_DIR, _ZERO_DIR, 0, 0, DirectoryStats(*([0] * 15)), CacheStats(*([0] * 7)))


def _size_histogram(name, direction, d):
    """Cumulative buckets; a transfer of exactly a bound's bytes is counted by
    the library in the bucket above it, Prometheus's 'le' would count it below."""
    buckets, running = [], 0
    for bound, count in zip(HIST_BOUNDS, d.hist):
        running += count
        buckets.append((str(float(bound)), running))
    buckets.append(("+Inf", running + d.hist[-1]))
    return HistogramMetricFamily(name, f"Batched {direction} transfers by size in bytes",
                                 buckets=buckets, sum_value=d.bytes)


class Collector:
    """Register with prometheus_client.REGISTRY.register(Collector(connector)).
    A closed connector exports nothing."""

    def __init__(self, connector, prefix="ecc"):
        self._connector = connector
        self._prefix = prefix

    def describe(self):
        return list(self._families(_ZERO, 0))

    def collect(self):
        try:
            stats = self._connector.stats()
            block_size = self._connector.describe().block_size
        except EccError:
            return
        yield from self._families(stats, block_size)

    def _families(self, s, block_size):
        p = self._prefix
        for direction, d in (("save", s.save), ("load", s.load)):
            for suffix, field, scale, text in DIRECTION_COUNTERS:
                yield CounterMetricFamily(f"{p}_{direction}_{suffix}", f"{text} ({direction})",
                                          value=getattr(d, field) * scale)
            yield _size_histogram(f"{p}_{direction}_size_bytes", direction, d)
        yield from self._directory(p, s.directory, block_size)
        for field, scale, suffix, text in CACHE_COUNTERS:
            yield CounterMetricFamily(f"{p}_cache_{suffix}", text,
                                      value=getattr(s.cache, field) * scale)

    @staticmethod
    def _directory(p, d, block_size):
        for field, text in DIRECTORY_GAUGES:
            yield GaugeMetricFamily(f"{p}_directory_{field}", text, value=getattr(d, field))
        blocks = d.blocks_used + d.blocks_free
        yield GaugeMetricFamily(f"{p}_directory_occupancy", "Fraction of the blocks in use",
                                value=d.blocks_used / blocks if blocks else 0.0)
        yield GaugeMetricFamily(f"{p}_directory_used_bytes", "Bytes of the blocks in use",
                                value=d.blocks_used * block_size)
        yield GaugeMetricFamily(f"{p}_directory_free_bytes", "Bytes of the free blocks",
                                value=d.blocks_free * block_size)
        for field, text in DIRECTORY_COUNTERS:
            yield CounterMetricFamily(f"{p}_directory_{field}", text, value=getattr(d, field))

# SPDX-License-Identifier: Apache-2.0
"""bench/serving/encode_prefill.py end to end on the CPU (--encoder tiny, a
few requests): the three modes run in real processes, the table has every
row, and the bitwise check of ecc's loads passes."""

import re
import subprocess
import sys

from conftest import REPO


def test_the_encode_then_prefill_benchmark_runs_and_checks_its_bytes():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "serving" / "encode_prefill.py"),
                        "--encoder", "tiny", "--requests", "60", "--universe", "30",
                        "--cache-images", "8", "--alphas", "1.0", "--verify", "4"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("  1.0")]
    assert [row[1] for row in rows] == ["none", "private", "ecc"]
    none, private, ecc_row = rows
    assert none[6] == "0.0%" and float(ecc_row[6].rstrip("%")) > 0
    m = re.search(r"bitwise: (\d+) of (\d+) embeddings loaded through ecc equal", r.stdout)
    assert m and m.group(1) == m.group(2) and int(m.group(2)) > 0, r.stdout

# SPDX-License-Identifier: Apache-2.0
"""A connector inherited through fork(): in the child every call raises
ECC_ERR_CLOSED naming the parent, close() and the interpreter's exit return at
once whatever the parent's threads were doing at fork (inside a call, holding
the client's locks, polling), and the parent's connector and bytes are intact.
Each case runs in its own process (fork_child.py), under a deadline."""

import json
import os
import subprocess
import sys

from conftest import PYTHON_DIR, region_overrides

PROMPT_S = 1.0  # a close or exit that does not wait for anything
# ThreadSanitizer stops a child of a threaded process that starts a thread
# ("dup thread with used id"): there the children open no connector of their own.
OWN = "libtsan" not in os.environ.get("LD_PRELOAD", "")


def run(mode, ini, region_dir, tmp_path, timeout=60, **kw):
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), FORK_REPORT=str(tmp_path / "report"),
               FORK_OWN="1" if OWN else "0")
    o = region_overrides(region_dir, **kw)
    p = subprocess.run([sys.executable, str(PYTHON_DIR / "tests" / "fork_child.py"), mode,
                        str(ini), json.dumps(o)], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1]), o


def test_a_child_forked_while_a_thread_is_inside_a_call(ini, region_dir, tmp_path):
    r, o = run("inside", ini, region_dir, tmp_path, directory=True)
    assert r["child_status"] == 0, f"the child did not exit ({r['child_status']}) in " \
        f"{r['child_s']:.1f} s"
    child = r["child"]
    assert child["closed_before"], "the inherited connector did not say it is closed"
    for name, got in child["refusals"].items():
        assert got != "returned", f"{name} ran on the parent's connector in the child"
        code, message = got
        assert code == "ECC_ERR_CLOSED", (name, got)
        assert message.startswith(f"{name}: "), (name, message)
        assert f"opened by process {r['parent']}" in message, message
        assert f"process {child['pid']}, a child made by fork()" in message, message
        assert "open a new ecc.Connector in this process" in message, message
    assert child["pending_s"] < PROMPT_S and child["close_s"] < PROMPT_S
    assert child["close_again_s"] < PROMPT_S
    if OWN:
        assert child["own_reads_parent_bytes"], "the child's own connector did not read the region"
    assert r["child_s"] < 5 * PROMPT_S
    assert r["parent_reads_its_bytes"], "the child's close touched the parent's region"
    assert r["parent_close_s"] < PROMPT_S
    assert not (region_dir / f"ecc-{o['region.name']}.region").exists()


def test_a_child_forked_while_a_thread_holds_the_clients_locks(ini, region_dir, tmp_path):
    r, _ = run("locks", ini, region_dir, tmp_path)
    assert r["child_status"] == 0, f"the child did not exit ({r['child_status']})"
    child = r["child"]
    assert child["pending_s"] < PROMPT_S, "pending waited for a lock the parent held"
    assert child["close_s"] < PROMPT_S, "close waited for a lock the parent held"
    if OWN:
        assert child["open_s"] < 5 * PROMPT_S, "a new connector waited for the library lock"
    assert r["parent_close_s"] < PROMPT_S


def test_children_forked_while_a_thread_polls_exit_at_once(ini, region_dir, tmp_path):
    r, _ = run("loop", ini, region_dir, tmp_path)
    assert r["forked"] == [0] * len(r["forked"]), f"forked children: {r['forked']}"
    assert r["forked_max_s"] < 5 * PROMPT_S
    assert r["mp"] == [0] * len(r["mp"]), f"multiprocessing workers: {r['mp']}"
    assert r["parent_close_s"] < PROMPT_S

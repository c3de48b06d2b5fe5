# SPDX-License-Identifier: Apache-2.0
"""The README's Python example, run as it is written, from the checkout's root."""

import os
import re
import subprocess
import sys

from conftest import PYTHON_DIR, REPO


def test_the_readme_python_example_runs(tmp_path):
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "the README should have one Python example"
    # conf/default.ini under a region name of its own: the demo's tests use
    # the same file at the same time.
    conf = tmp_path / "conf"
    conf.mkdir()
    ini = (REPO / "conf" / "default.ini").read_text()
    (conf / "default.ini").write_text(re.sub(r"(?m)^name = demo$", f"name = readme{os.getpid()}",
                                             ini))
    (conf / "default.ini").chmod(0o600)
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    r = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # nothing said beside what the example does

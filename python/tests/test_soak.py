"""The soak test's 45-second form (tools/soak.py; docs/RELIABILITY.md): 4
ranks run every op with groups torn down and recreated every 15 s, every
result checked, and RSS, fds, threads, goroutines and shm files flat after
the warm-up."""

from __future__ import annotations

import csv
import os
import sys

import pytest

from harness import run_session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(180)
def test_soak_45s(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = run_session([sys.executable, os.path.join(ROOT, "tools", "soak.py"), "--duration", "45",
                       "--sample-every", "7.5", "--recreate-every", "15", "--out", str(tmp_path)],
                      cwd=ROOT, env=env, timeout=170)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "soak: ok" in out.stdout, out.stdout
    summary = [line for line in out.stdout.splitlines() if "results checked" in line]
    assert summary and " 0 wrong" in summary[0], out.stdout
    assert "0 recreations" not in summary[0], out.stdout
    with open(tmp_path / "soak.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["rank"] for r in rows} == {"0", "1", "2", "3"}
    assert len(rows) >= 4 * 4, rows
    md = (tmp_path / "soak.md").read_text()
    assert "flat." in md and "/tmp" not in md and "/work" not in md, md

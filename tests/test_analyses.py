"""The benchmark scripts run end to end at tiny sizes and print their tables (figures are not asserted)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(script: str, *args: str) -> str:
    result = subprocess.run([sys.executable, str(ROOT / "analyses" / script), *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_bench_inference_quick():
    out = run("bench_inference.py", "--quick", "--rounds", "1", "--embedding-rounds", "1")
    for name in ("transformer forward", "reference Lloyd", "transformer run_with_cache", "sklearn KMeans loop"):
        assert len(re.findall(rf"{name}\s+[\d.]+\s+[\d.]+", out)) == 2, name  # 1 and 2 threads
    assert re.search(r"^\s*25\s+25/5\s", out, re.M)


def test_bench_training_quick():
    out = run("bench_training.py", "--quick", "--rounds", "1", "--loop-steps", "10")
    assert re.search(r"interp\s+[\d.]+\s+1\.00", out) and re.search(r"reference\s+[\d.]+\s+[\d.]+", out)
    assert "projected 10,000 steps" in out

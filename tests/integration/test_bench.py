"""``prague-bench`` end to end, tiny: every output it promises, from real Horovod jobs."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multirank


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_tiny_bench_run_writes_its_table_json_and_plots(tmp_path, framework):
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "horovod_prague.bench", "--ranks", "4"]
    command += ["--framework", framework]
    # PyTorch also runs the baseline that waits without spinning (allreduce-poll).
    systems = "allreduce,allreduce-poll,prague" if framework == "torch" else "allreduce,prague"
    command += ["--scenarios", "persistent", "--systems", systems, "--seeds", "1"]
    command += ["--steps", "24", "--compute-ms", "20", "--params", "20000", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    jobs = len(systems.split(","))
    assert f"[1/{jobs}" in run.stdout and f"[{jobs}/{jobs}" in run.stdout  # a line per job
    assert "vs AR" in run.stdout
    results = json.loads((out / "results.json").read_text())
    # Rows of another framework than PyTorch name it: "prague (tensorflow)".
    suffix = "" if framework == "torch" else f" ({framework})"
    rows = {r["system"].removesuffix(suffix): r for r in results["summary"]}
    # Ratios are to the faster All-Reduce of the block (stock, or allreduce-poll where it ran).
    baselines = [rows[b]["throughput"] for b in ("allreduce", "allreduce-poll") if b in rows]
    assert max(baselines) == 1.0 and min(baselines) <= 1.0
    assert rows["prague"]["same_model"] and rows["allreduce"]["same_model"]
    assert rows["prague"]["bound"] == pytest.approx(2.5, abs=0.05)  # one 3x rank of 4
    runs = {r["system"]: r for r in results["runs"]}
    assert {r["framework"] for r in runs.values()} == {framework}
    # All-Reduce's ranks move together; under Prague the straggler takes a third of the steps.
    assert runs["allreduce"]["steps_per_rank"] == [24] * 4
    if framework == "torch":
        assert runs["allreduce-poll"]["steps_per_rank"] == [24] * 4
        assert rows["allreduce-poll"]["same_model"]
    assert runs["prague"]["steps_per_rank"][3] * 3 == pytest.approx(
        runs["prague"]["steps_per_rank"][0], abs=3
    )
    for png in ("accuracy_vs_time.png", "throughput.png"):
        assert (out / png).stat().st_size > 1000


def test_allreduce_poll_is_refused_for_tensorflow():
    command = [sys.executable, "-m", "horovod_prague.bench", "--framework", "tensorflow"]
    command += ["--systems", "allreduce,allreduce-poll", "--out", "unused"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2
    assert "allreduce-poll is PyTorch's" in run.stderr

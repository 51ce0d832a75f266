"""Bad options fail at init with a clear error on every rank, never a hang."""

import json
import re

import pytest
from launch import run_ranks

pytestmark = pytest.mark.multirank


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"strategy": "fancy"}, "ValueError", "strategy: unknown strategy 'fancy'"),
        ({"group_size": 1}, "ValueError", "group_size: must be at least 2"),
        ({"group_size": 4}, "ValueError", "group_size: 4 is larger than the world size 2"),
        ({"threshold": -1}, "ValueError", "threshold: must be >= 0"),
        ({"strategy": "adpsgd", "group_size": 3}, "ValueError", "group_size"),
        (
            {"threshold": 1, "rank_1": {"threshold": 5}},
            "ValueError",
            "options differ between rank .* threshold=1 vs 5|threshold=5 vs 1",
        ),
    ],
)
def test_bad_options_raise_on_every_rank(tmp_path, options, error, message):
    job = run_ranks("bad_options.py", tmp_path, np=2, args=(json.dumps(options),), timeout=120)
    assert len(job.reports) == 2, job.output[-3000:]
    for rep in job.reports:
        assert rep["error"] == error, rep
        assert re.search(message, rep["message"]), rep["message"]

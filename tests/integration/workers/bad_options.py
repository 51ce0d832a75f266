"""Call init with the options in argv (JSON); report the exception each rank got, if any.
A "rank_1" key overrides options on rank 1 only (a mismatch between ranks)."""

import json
import sys

from _report import launcher_rank, report

import horovod_prague.torch as hvd

options = json.loads(sys.argv[1])
if launcher_rank() == 1:
    options.update(options.pop("rank_1", {}))
options.pop("rank_1", None)
try:
    hvd.init(**options)
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    outcome = {"error": type(e).__name__, "message": str(e)}
report(outcome)

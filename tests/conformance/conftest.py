import os

# The corpus's scripts run a Horovod job when imported: never collect them (doctests included).
collect_ignore_glob = ["scripts/*"]

# Gloo's timeout for the corpus's jobs: longer than Horovod's 30 s so that a job rides out this
# machine stalling, and shorter than a run's deadline so that a lost rank ends in Gloo's error.
os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", "90")

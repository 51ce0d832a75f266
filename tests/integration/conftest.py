import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# Worker scripts run a Horovod job when imported: never collect them (doctests included).
collect_ignore_glob = ["workers/*"]

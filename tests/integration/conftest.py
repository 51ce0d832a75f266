import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Worker scripts run a Horovod job when imported: never collect them (doctests included).
collect_ignore_glob = ["workers/*"]

# Gloo's timeout for every job the tests start that does not set its own (the benchmark
# jobs included): longer than Horovod's 30 s, so that a job rides out this machine stalling
# (docs/limitations.md), and shorter than the tests' own deadlines (120 s and more for
# a job), so that a real hang still ends in Gloo's error, which names its process set.
os.environ.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", "90")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report also shows where each rank's Horovod loop failed, from every
    job the test started: those lines come first in a job's log, before any tail that an
    assertion quotes. The start and end of every test go to ``test-times.log`` in pytest's
    temporary folder."""
    from launch import STARTED_LOGS, loop_failures

    if call.when == "setup":
        item.stash[_FIRST_LOG] = len(STARTED_LOGS)
    outcome = yield
    report = outcome.get_result()
    log_dir = item.config.stash.get(_LOG_DIR, None)
    if call.when == "call" and log_dir is not None:
        # When each test ran, beside pytest's kept folders: a failure can then be set against
        # what the machine did at that moment.
        try:
            with (log_dir / "test-times.log").open("a") as times:
                times.write(f"{call.start:.3f} {call.stop:.3f} {report.outcome} {item.nodeid}\n")
        except OSError:
            pass  # a full or removed temporary folder: the note is lost, not the test
    if report.failed and call.when == "call":
        lines = loop_failures(STARTED_LOGS[item.stash.get(_FIRST_LOG, 0) :])
        if lines:
            report.sections.append(("Horovod loop failures", "\n".join(lines)))


_FIRST_LOG = pytest.StashKey[int]()
_LOG_DIR = pytest.StashKey[Path]()


@pytest.fixture(scope="session", autouse=True)
def _log_dir(request, tmp_path_factory) -> Path:
    """pytest's temporary folder of this run, where ``test-times.log`` and ``pauses.log`` go
    (beside the tests' own folders, which pytest keeps for its last three runs)."""
    request.config.stash[_LOG_DIR] = tmp_path_factory.getbasetemp()
    return request.config.stash[_LOG_DIR]


@pytest.fixture(scope="session", autouse=True)
def _pause_watch(_log_dir):
    """Note every moment this thread of pytest's process did not run for over 2 s in
    ``pauses.log``, with the CPU time the hypervisor took meanwhile: a machine that stalls
    for longer than Gloo's timeout makes every rank's wait expire at once. (A thread of
    pytest that holds the GIL that long shows here too.)"""
    log = _log_dir / "pauses.log"
    done = threading.Event()

    def watch() -> None:
        last, stolen = time.monotonic(), _stolen_ticks()
        while not done.wait(0.1):
            now, now_stolen = time.monotonic(), _stolen_ticks()
            if now - last > 2.0:
                try:
                    with log.open("a") as out:
                        out.write(
                            f"{time.time():.3f} paused {now - last:.1f} s, "
                            f"steal +{now_stolen - stolen} ticks\n"
                        )
                except OSError:
                    pass  # a full or removed temporary folder: the note is lost, not the run
            last, stolen = now, now_stolen

    watcher = threading.Thread(target=watch, name="pause-watch", daemon=True)
    watcher.start()
    yield
    done.set()
    watcher.join()


def _stolen_ticks() -> int:
    """The machine's CPU time taken by its hypervisor so far (``steal`` in /proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            return int(stat.readline().split()[8])
    except (OSError, IndexError, ValueError):
        return 0


# ----------------------------------------------------------------- emulated hosts
# Network namespaces with sshd that stand in for a cluster's hosts (scripts/hosts.py).

HOSTS_SCRIPT = Path(__file__).parents[2] / "scripts" / "hosts.py"


def load_hosts_module():
    """The emulated hosts' module (``horovod_prague.bench.hosts``, run as scripts/hosts.py)."""
    from horovod_prague.bench import hosts

    return hosts


def hosts_unavailable(reason: str):
    """Skip (fail on CI, where the hosts must work) a test that needs emulated hosts."""
    message = f"emulated hosts cannot be made here: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


class EmulatedHosts:
    """Makes emulated hosts on demand and keeps one set alive between tests.

    ``emulated_hosts(4, loopback_name=True)`` returns a live ``Hosts`` (``.names``,
    ``.addresses``, ``.run_command(cmd)``, ``.host_spec()``, ``.shape(rate)``...). Asking for
    the set that is already up reuses it, reset (no shaping, no process left from an earlier
    test but sshd); asking for another one (only one can exist on a machine) replaces it.
    """

    def __init__(self):
        self.module = load_hosts_module()
        self._hosts = None
        self._key = None

    def __call__(self, n: int = 2, *, loopback_name: bool = False, slots: int = 2):
        key = (n, loopback_name, slots)
        if self._hosts is not None and self._key == key and self._hosts.alive():
            self._hosts.reset()
            return self._hosts
        self.close()
        self.require()
        try:
            self._hosts = self.module.Hosts.up(n, slots=slots, loopback_name=loopback_name)
        except self.module.HostsUnavailable as e:
            hosts_unavailable(str(e))
        self._key = key
        return self._hosts

    def require(self):
        """Skip (fail on CI) unless hosts can be made here; for tests that make their own."""
        reason = self.module.check_environment()
        if reason:
            hosts_unavailable(reason)

    def close(self):
        """Remove the hosts and anything a test left of them (also hosts made by the CLI)."""
        hosts, self._hosts, self._key = self._hosts, None, None
        if hosts is not None:
            hosts.down()
        elif self.module.check_environment() is None:
            self.module.down()


@pytest.fixture(scope="session")
def emulated_hosts():
    """Factory of emulated hosts: ``hosts = emulated_hosts(2)``; all removed at the end of the
    session, whatever the tests did. Skips (fails when ``CI=true``) where they cannot be made.
    """
    factory = EmulatedHosts()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def hosts(request, emulated_hosts):
    """Two emulated hosts, or what ``request.param`` asks for when parametrized indirectly:
    ``@pytest.mark.parametrize("hosts", [{"n": 4, "loopback_name": True}], indirect=True)``.
    """
    return emulated_hosts(**getattr(request, "param", {}))

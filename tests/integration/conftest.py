import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Worker scripts run a Horovod job when imported: never collect them (doctests included).
collect_ignore_glob = ["workers/*"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report also shows where each rank's Horovod loop failed, from every
    job the test started: those lines come first in a job's log, before any tail that an
    assertion quotes."""
    from launch import STARTED_LOGS, loop_failures

    if call.when == "setup":
        item.stash[_FIRST_LOG] = len(STARTED_LOGS)
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        lines = loop_failures(STARTED_LOGS[item.stash.get(_FIRST_LOG, 0) :])
        if lines:
            report.sections.append(("Horovod loop failures", "\n".join(lines)))


_FIRST_LOG = pytest.StashKey[int]()


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

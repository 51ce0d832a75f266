"""The patched Horovod's Gloo launcher names the host of a process that failed, beside its
rank (``patches/0019``): in the line that says it exited, in the line that ends the others,
and in the final error."""

import signal
import types

import pytest

gloo_run = pytest.importorskip("horovod.runner.gloo_run")

# Rank 1 fails at once; rank 0 would sleep (exec'd: the launcher terminates only its own
# children), and is ended by the launcher after rank 1 failed.
FAIL_ON_RANK_1 = ["sh", "-c", 'if [ "$HOROVOD_RANK" = 1 ]; then exit 3; fi; exec sleep 60']


def _settings(hosts: str, num_proc: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        hosts=hosts,
        num_proc=num_proc,
        elastic=False,
        verbose=0,
        output_filename=None,
        ssh_port=None,
        ssh_identity_file=None,
        prefix_output_with_timestamp=False,
    )


def test_a_failed_process_is_named_with_its_host(capfd, monkeypatch):
    settings = _settings("localhost:2", 2)
    servers = []

    class Rendezvous(gloo_run.RendezvousServer):
        def start(self, *args, **kwargs):
            servers.append(self)
            return super().start(*args, **kwargs)

    monkeypatch.setattr(gloo_run, "RendezvousServer", Rendezvous)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(RuntimeError) as failure:
            gloo_run.launch_gloo(
                FAIL_ON_RANK_1,
                gloo_run._exec_command_fn(settings),
                settings,
                nics={"lo"},
                env={"PATH": "/usr/bin:/bin"},
                server_ip="127.0.0.1",
            )
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for server in servers:
            server.stop()
            server._httpd.server_close()
    printed = capfd.readouterr().out
    assert "Process 1 on host localhost exit with status code 3." in printed, printed
    assert "Terminating remaining workers after failure of Process 1 on host localhost." in printed
    assert "Process name: 1\nHost: localhost\nExit code: 3\n" in str(failure.value)

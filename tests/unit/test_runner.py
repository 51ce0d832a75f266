"""The horovodrun plugin: its flags, its checks and the variables it hands the workers."""

import argparse
import dataclasses

import pytest

from horovod_prague import runner
from horovod_prague.common.adapt import adapt_to_world
from horovod_prague.common.config import ENV_PREFIX, PragueConfig
from horovod_prague.common.topology import NODES_VAR


def _parser():
    parser = argparse.ArgumentParser(prog="horovodrun")
    parser.add_argument("-np", dest="num_proc", type=int)
    parser.add_argument("-H", dest="hosts")
    runner.add_arguments(parser)
    return parser


def _check(argv, env=None):
    parser = _parser()
    args = parser.parse_args(argv)
    runner.check_args(parser, args, env or {})
    return args


@pytest.fixture(autouse=True)
def _hook_present(monkeypatch):
    monkeypatch.setattr(runner, "hook_installed", lambda: True)


def test_every_option_has_a_flag_in_the_help():
    text = _parser().format_help()
    assert runner.GROUP_TITLE in text
    for field in dataclasses.fields(PragueConfig):
        assert runner.flag(field.name) in text
        assert ENV_PREFIX + field.name.upper() in text


def test_flags_become_the_workers_variables():
    args = _check(
        [
            "-np",
            "8",
            "--prague",
            "static",
            "--prague-group-size",
            "4",
            "--prague-sync-every",
            "100",
            "--prague-timeout",
            "5",
        ]
    )
    env = {"UNRELATED": "1"}
    runner.set_env(env, args)
    assert env == {
        "UNRELATED": "1",
        "HOROVOD_PRAGUE_STRATEGY": "static",
        "HOROVOD_PRAGUE_GROUP_SIZE": "4",
        "HOROVOD_PRAGUE_SYNC_EVERY": "100",
        "HOROVOD_PRAGUE_TIMEOUT": "5.0",
    }
    # The variables give the workers the same config the flags describe.
    config = PragueConfig.from_sources(env=env)
    assert (config.strategy, config.group_size, config.sync_every) == ("static", 4, 100)


def _with_command(parser):  # as horovodrun's parser ends
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


@pytest.mark.parametrize("program", ["python3", __file__])
def test_a_bare_flag_switches_on_the_default_design(program):
    parser = _with_command(_parser())
    args = parser.parse_args(["-np", "4", "--prague", program, "-m", "train", "--lr", "1"])
    runner.check_args(parser, args, {})
    assert args.command == [program, "-m", "train", "--lr", "1"]
    env = {}
    runner.set_env(env, args)
    assert env == {"HOROVOD_PRAGUE_STRATEGY": PragueConfig().strategy}
    config = PragueConfig.from_sources(env=env)
    assert config.staleness == PragueConfig().staleness
    assert config.staleness_for(4) > 0 and config.staleness_for(8) > 0


def test_a_strategy_typo_is_not_taken_for_the_command():
    parser = _with_command(_parser())
    with pytest.raises(SystemExit):
        parser.parse_args(["-np", "4", "--prague", "smrt", "python3", "train.py"])


SCRIPT = ["python3", "train.py", "--prague", "data.txt", "--prague-group-size", "--prague"]
"""A command whose script has options of its own named like the launcher's."""


@pytest.mark.parametrize(
    ("launcher", "strategy"),
    [
        (["-np", "2", "--prague"], PragueConfig().strategy),  # the last flag before the command
        (["--prague", "-np", "2"], PragueConfig().strategy),
        (["-np", "2", "--prague=static"], "static"),
        (["-np", "2", "--prague", "static"], "static"),
        (["-np", "2"], None),  # switched on by HOROVOD_PRAGUE_STRATEGY, or not at all
        (["-np", "2", "-H", "localhost:2", "--prague-seed", "3", "--prague"], "smart"),
        (["-np=2", "-Hlocalhost:2", "--prague-group", "2", "--prague"], "smart"),  # abbreviated
    ],
)
def test_the_command_keeps_its_own_arguments(tmp_path, monkeypatch, launcher, strategy):
    """Only a bare ``--prague`` among the launcher's arguments gets the default strategy: the
    script's arguments reach it unchanged, even those named like Prague's flags."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.txt").write_text("x")  # a file: a bare --prague before it looks bare
    (tmp_path / "train.py").write_text("")
    parser = _with_command(_parser())
    args = parser.parse_args([*launcher, *SCRIPT])
    runner.check_args(parser, args, {"HOROVOD_PRAGUE_STRATEGY": "smart"})
    assert args.command == SCRIPT
    assert args.prague_strategy == strategy
    assert args.prague_group_size == (2 if "--prague-group" in launcher else None)


def test_without_the_flag_nothing_changes():
    args = _check(["-np", "4"])
    env = {}
    runner.set_env(env, args)
    assert env == {}


def test_the_variable_alone_switches_prague_on_and_flags_add_to_it():
    args = _check(["-np", "4", "--prague-seed", "3"], env={"HOROVOD_PRAGUE_STRATEGY": "smart"})
    env = {}
    runner.set_env(env, args)
    assert env == {"HOROVOD_PRAGUE_SEED": "3"}


@pytest.mark.parametrize(
    ("argv", "nodes"),
    [
        (["-np", "6", "-H", "h1:4,h2:2", "--prague"], "4,2"),
        (["-np", "6", "-H", "h1:4,h2:4", "--prague"], "4,2"),  # mpirun -map-by slot
        (["-np", "2", "-H", "h1:0,h2:1,h3:1", "--prague"], "1,1"),
        (["-np", "6", "-H", "h1:4,h2:2", "--gloo", "--prague"], None),  # the store tells
        (["-np", "6", "-H", "h1:4,h2:x", "--prague"], None),  # horovodrun refuses it
        (["-np", "4", "-H", "h1:4,h2:4", "--prague"], None),  # one host: its own variables
        (["-np", "6", "-H", "h1:4,h2:2"], "4,2"),  # no flag: the explicit API may need it
        (["-np", "6", "-H", "h1:4,h2:2", "--min-np", "2", "--prague"], None),  # elastic
    ],
)
def test_the_ranks_on_each_host_reach_the_workers(argv, nodes):
    """Under MPI no Gloo store tells a rank the other hosts' ranks before ``init``."""
    parser = _parser()
    parser.add_argument("--min-np", dest="min_num_proc", type=int)
    parser.add_argument("--gloo", dest="use_gloo", action="store_true")
    args = parser.parse_args(argv)
    runner.check_args(parser, args, {})
    env = {}
    runner.set_env(env, args)
    assert env.get(NODES_VAR) == nodes


def _error(capsys, argv, env=None):
    with pytest.raises(SystemExit) as exit_info:
        _check(argv, env)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (
            ["-np", "4", "--prague-group-size", "2"],
            {},
            "--prague-group-size given without --prague",
        ),
        (["-np", "4", "--prague", "fancy"], {}, "invalid choice: 'fancy'"),
        (
            ["-np", "4", "--prague", "smart", "--prague-group-size", "1"],
            {},
            "--prague-group-size (HOROVOD_PRAGUE_GROUP_SIZE): must be 0 (auto) or at least 2",
        ),
        (
            ["-np", "4", "--prague", "smart", "--prague-group-size", "8"],
            {},
            "--prague-group-size: a group of 8 ranks cannot form in a job of 4",
        ),
        (
            ["-np", "4", "--prague", "smart", "--prague-threshold", "x"],
            {},
            "argument --prague-threshold: invalid int value: 'x'",
        ),
        (
            ["-np", "4", "--prague", "smart"],
            {"HOROVOD_PRAGUE_SEED": "one"},
            "HOROVOD_PRAGUE_SEED: expected int, got 'one'",
        ),
        (
            ["-np", "4", "--prague", "smart", "--prague-pool-size", "1"],
            {},
            "--prague-pool-size (HOROVOD_PRAGUE_POOL_SIZE): one division of 4 ranks",
        ),
        (
            ["-np", "6", "-H", "a:3,b:3", "--prague", "adpsgd", "--prague-group-size", "3"],
            {},
            "--prague-group-size (HOROVOD_PRAGUE_GROUP_SIZE): adpsgd averages in pairs",
        ),
        (
            ["-np", "4", "--prague", "smart", "--prague-sync-every", "-1"],
            {},
            "--prague-sync-every (HOROVOD_PRAGUE_SYNC_EVERY): must be >= 0",
        ),
        *(
            (
                ["-np", "4", "--prague", "smart", "--prague-timeout", seconds],
                {},
                "--prague-timeout (HOROVOD_PRAGUE_TIMEOUT): must be a number of seconds above 0 "
                f"and at most 604800 (a week), got {float(seconds)}",
            )
            for seconds in ("inf", "nan", "1e12", "0")
        ),
        (
            ["-np", "4", "--prague", "smart"],
            {"HOROVOD_PRAGUE_TIMEOUT": "inf"},
            "--prague-timeout (HOROVOD_PRAGUE_TIMEOUT): must be a number of seconds above 0 "
            "and at most 604800 (a week), got inf (from HOROVOD_PRAGUE_TIMEOUT='inf')",
        ),
    ],
)
def test_bad_values_stop_horovodrun_with_the_flag_named(capsys, argv, env, message):
    assert message in _error(capsys, argv, env)


def test_a_missing_import_hook_is_an_error_not_a_silent_stock_run(capsys, monkeypatch):
    monkeypatch.setattr(runner, "hook_installed", lambda: False)
    assert "import hook is not installed" in _error(capsys, ["-np", "4", "--prague", "smart"])


def test_the_variable_without_the_flag_and_without_the_hook_is_an_error(capsys, monkeypatch):
    monkeypatch.setattr(runner, "hook_installed", lambda: False)
    message = _error(capsys, ["-np", "4"], {"HOROVOD_PRAGUE_STRATEGY": "smart"})
    assert "HOROVOD_PRAGUE_STRATEGY: horovod-prague's import hook is not installed" in message


def _parser_with_elastic():
    parser = _parser()
    parser.add_argument("--min-np", dest="min_num_proc", type=int)
    parser.add_argument("--max-np", dest="max_num_proc", type=int)
    parser.add_argument("--host-discovery-script", dest="host_discovery_script")
    return parser


def _elastic_check(capsys, argv):
    parser = _parser_with_elastic()
    runner.check_args(parser, parser.parse_args(argv), {})
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "checked", "adapted_sizes"),
    [
        (["-np", "2", "--min-np", "1", "--prague"], "1 to 2", [1]),
        (
            ["-np", "4", "--min-np", "2", "--prague", "smart", "--prague-group-size", "4"],
            "2 to 4",
            [2, 3],
        ),
        (["-np", "4", "--min-np", "3", "--prague", "static"], "3 to 4", [3]),
        (
            ["-np", "4", "--min-np", "4", "--max-np", "6", "--prague", "static"],
            "4 to 6",
            [5],  # a world that grows: 5 ranks are no multiple of 2; 6 are
        ),
        (
            ["-np", "4", "--host-discovery-script", "d.sh", "--max-np", "7", "--prague", "static"],
            "4 to 7",  # elastic without --min-np, which is then -np
            [5, 7],
        ),
    ],
)
def test_an_elastic_job_hears_before_it_starts_how_its_workers_will_adapt_the_options(
    capsys, argv, checked, adapted_sizes
):
    """``--min-np`` and ``--max-np`` allow worlds the options do not fit: horovodrun warns,
    naming each size and the options its workers will run with there, which are what every
    worker of that world computes (``adapt_to_world``)."""
    err = _elastic_check(capsys, argv)
    assert err.startswith(
        "horovodrun: warning: the Prague options do not fit every world this elastic job may "
        f"run in ({checked} ranks); in those, every worker runs with options adapted"
    )
    config = PragueConfig.from_sources(runner.given(_parser_with_elastic().parse_args(argv)), {})
    listed = [line for line in err.splitlines() if line.startswith("  ")]
    expected = []
    for size in adapted_sizes:
        adapted = adapt_to_world(config, size)
        rank_s = "rank" if size == 1 else "ranks"
        expected.append(f"  {size} {rank_s}: {adapted.changes()} ({'; '.join(adapted.reasons)})")
    assert listed == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["-np", "4", "--min-np", "2", "--prague"],
        ["-np", "4", "--min-np", "2", "--prague", "adpsgd"],
        ["-np", "2", "--prague"],  # not elastic
    ],
)
def test_options_that_fit_every_elastic_world_start_without_a_warning(capsys, argv):
    assert _elastic_check(capsys, argv) == ""


def test_an_elastic_job_still_stops_on_options_that_do_not_fit_its_np(capsys):
    parser = _parser_with_elastic()
    args = parser.parse_args(["-np", "2", "--min-np", "1", "--prague-group-size", "4", "--prague"])
    with pytest.raises(SystemExit):
        runner.check_args(parser, args, {})
    assert "a group of 4 ranks cannot form in a job of 2" in capsys.readouterr().err

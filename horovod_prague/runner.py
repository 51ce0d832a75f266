"""The ``horovodrun --prague`` options: a plugin for Horovod's runner.

``patches/0005-runner-plugins.patch`` gives ``horovodrun`` an entry-point group,
``horovod.runner.plugins``; this package registers this module there. It adds one option per
Prague option (``--prague STRATEGY`` and ``--prague-<option>``), rejects bad values before any
worker starts, and turns the options into the ``HOROVOD_PRAGUE_*`` variables that reach every
worker. In a worker, ``HOROVOD_PRAGUE_STRATEGY`` switches on the drop-in
(``horovod_prague.common.import_hook``).

    >>> import argparse
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["--prague", "static", "--prague-group-size", "4"])
    >>> env = {}
    >>> set_env(env, args)
    >>> sorted(env.items())
    [('HOROVOD_PRAGUE_GROUP_SIZE', '4'), ('HOROVOD_PRAGUE_STRATEGY', 'static')]

Only this module and ``common.config`` are imported by ``horovodrun``; neither imports Horovod
or a framework.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from .common.adapt import adapt_to_world
from .common.config import ENV_PREFIX, HELP, STRATEGIES, PragueConfig
from .common.strategies import make_strategy
from .common.topology import NODES_VAR, Topology, node_sizes_of

GROUP_TITLE = "Prague arguments (horovod-prague)"
DEFAULT_STRATEGY = PragueConfig.strategy
HOOK_FILE = "horovod_prague_dropin.pth"


def flag(option: str) -> str:
    """The ``horovodrun`` flag of a Prague option: ``--prague`` or ``--prague-<option>``."""
    return "--prague" if option == "strategy" else "--prague-" + option.replace("_", "-")


def _dest(option: str) -> str:
    return "prague_" + option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every Prague option to ``parser`` in its own group (shown by ``--help``)."""
    group = parser.add_argument_group(
        GROUP_TITLE,
        "Average the model in small, changing groups instead of an all-reduce every step. "
        "The script is unchanged: hvd.init, hvd.DistributedOptimizer and Horovod's global "
        "collectives are replaced in every worker. Each option also reads from the "
        "HOROVOD_PRAGUE_<OPTION> variable named in its help.",
    )
    group.add_argument(
        flag("strategy"),
        dest=_dest("strategy"),
        nargs="?",
        const=DEFAULT_STRATEGY,
        choices=STRATEGIES,
        default=None,
        metavar="STRATEGY",
        help=f"switch Prague on, with this strategy: {', '.join(STRATEGIES)} (default "
        f"{DEFAULT_STRATEGY}; {ENV_PREFIX}STRATEGY)",
    )
    _accept_bare_flag(parser)
    for field in dataclasses.fields(PragueConfig):
        if field.name == "strategy":
            continue
        group.add_argument(
            flag(field.name),
            dest=_dest(field.name),
            type={"str": str, "int": int, "float": float}[str(field.type)],
            default=None,
            metavar=field.name.upper(),
            help=f"{HELP[field.name]} (default {field.default!r}; "
            f"{ENV_PREFIX}{field.name.upper()})",
        )


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The Prague options set on the command line."""
    values = {}
    for field in dataclasses.fields(PragueConfig):
        value = getattr(args, _dest(field.name), None)
        if value is not None:
            values[field.name] = value
    return values


def check_args(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    env: Mapping[str, str] | None = None,
) -> None:
    """Reject Prague options that cannot work, through ``parser.error`` (exit status 2)."""
    env = os.environ if env is None else env
    options = given(args)
    switched_on = "strategy" in options or bool(env.get(ENV_PREFIX + "STRATEGY"))
    if not switched_on:
        if options:
            names = ", ".join(flag(name) for name in options)
            parser.error(f"{names} given without --prague STRATEGY (or HOROVOD_PRAGUE_STRATEGY)")
        return
    try:
        config = PragueConfig.from_sources(options, env)
    except ValueError as e:
        parser.error(_name_flag(str(e)))
    num_proc = getattr(args, "num_proc", None)
    if num_proc is not None and config.group_size > num_proc:
        parser.error(
            f"{flag('group_size')}: a group of {config.group_size} ranks cannot form in a job "
            f"of {num_proc} (-np)"
        )
    topology = _topology(args)
    if topology is not None:
        try:
            make_strategy(config, topology)
        except ValueError as e:
            parser.error(_name_flag(str(e)))
    if _elastic(args):
        # Horovod's own defaults: --min-np is -np; without --max-np a discovered world may
        # grow without bound, of which the first ELASTIC_SIZES_CHECKED sizes are checked.
        smallest = getattr(args, "min_num_proc", None) or num_proc or 1
        largest = max(num_proc or 0, getattr(args, "max_num_proc", None) or 0, smallest)
        note = elastic_note(config, range(max(smallest, 1), largest + 1))
        if note:
            print(f"{parser.prog}: warning: {note}", file=sys.stderr, flush=True)
    if not hook_installed():
        how = "--prague" if "strategy" in options else f"{ENV_PREFIX}STRATEGY"
        parser.error(
            f"{how}: horovod-prague's import hook is not installed in this environment, so "
            f"the workers would run stock Horovod. {HOOK_FILE} is written by a regular install "
            "of the checkout (scripts/bootstrap.py does it, or pip install . in the checkout, "
            "docs/install.md); an editable install (pip install -e .) does not write it."
        )


ELASTIC_SIZES_SHOWN = 8
"""World sizes ``elastic_note`` lists one by one; it counts the rest."""
ELASTIC_SIZES_CHECKED = 256
"""World sizes ``elastic_note`` checks, from the smallest: ``--max-np`` may be far larger."""


def elastic_note(config: PragueConfig, sizes: range) -> str:
    """What the workers of an elastic job (``--min-np``) will do in each world of ``sizes``
    ranks that ``config`` cannot form groups in: run with the options adapted to it
    (``adapt.adapt_to_world``, as every worker of that world does, rank 0 warning); empty
    where the options fit every one. From ``--min-np`` to the larger of ``-np`` and
    ``--max-np``; the first ``ELASTIC_SIZES_CHECKED`` of them.

        >>> print(elastic_note(PragueConfig(), range(2, 5)))
        <BLANKLINE>
        >>> note = elastic_note(PragueConfig(group_size=4), range(2, 5)).splitlines()
        >>> print(note[0][:71])
        the Prague options do not fit every world this elastic job may run in (
        >>> for line in note[1:]:
        ...     print(line)
          2 ranks: group_size=2 instead of 4 (group_size=4 is larger than the world, so groups of 2)
          3 ranks: group_size=3 instead of 4 (group_size=4 is larger than the world, so groups of 3)
    """
    checked = sizes[:ELASTIC_SIZES_CHECKED]
    adapted = [a for a in (adapt_to_world(config, n) for n in checked) if a.changed]
    if not adapted:
        return ""
    lines = [
        "the Prague options do not fit every world this elastic job may run in "
        f"({sizes.start} to {sizes[-1]} ranks); in those, every worker runs with options "
        "adapted to the world, and rank 0 warns at each reset:"
    ]
    for a in adapted[:ELASTIC_SIZES_SHOWN]:
        rank_s = "rank" if a.size == 1 else "ranks"
        lines.append(f"  {a.size} {rank_s}: {a.changes()} ({'; '.join(a.reasons)})")
    if len(adapted) > ELASTIC_SIZES_SHOWN:
        lines.append(f"  and {len(adapted) - ELASTIC_SIZES_SHOWN} sizes more")
    return "\n".join(lines)


def _accept_bare_flag(parser: argparse.ArgumentParser) -> None:
    """Let ``--prague`` stand alone before the command: ``--prague python -m train``.

    argparse would take ``python`` as the strategy; the parser's ``parse_args`` now puts the
    default strategy after a bare ``--prague`` whose next word names a program or a file.
    """
    parse_args = parser.parse_args

    def parse_with_bare_flag(args: Any = None, namespace: Any = None) -> argparse.Namespace:
        argv = list(sys.argv[1:] if args is None else args)
        return parse_args(with_default_strategy(argv, parser), namespace)

    parser.parse_args = parse_with_bare_flag  # type: ignore[method-assign]


def with_default_strategy(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with the default strategy after a bare ``--prague`` that precedes the command.

    Only the launcher's own arguments are read: ``parser``'s options tell which words are
    their values, so the scan stops where the command begins, and the command's arguments
    (a ``--prague`` of the script's own among them) are never changed.

    >>> parser = argparse.ArgumentParser(prog="horovodrun")
    >>> _ = parser.add_argument("-np", type=int)
    >>> add_arguments(parser)
    >>> _ = parser.add_argument("command", nargs=argparse.REMAINDER)
    >>> with_default_strategy(["-np", "2", "--prague", "python", "-m", "train"], parser)
    ['-np', '2', '--prague', 'smart', 'python', '-m', 'train']
    >>> with_default_strategy(["--prague", "static", "python"], parser)
    ['--prague', 'static', 'python']
    >>> with_default_strategy(["-np", "2", "python", "-m", "train", "--prague", "python"], parser)
    ['-np', '2', 'python', '-m', 'train', '--prague', 'python']
    >>> _ = parser.add_argument("--mpi-args")
    >>> with_default_strategy(["--mpi-args=-x A --oversubscribe", "--prague", "python"], parser)
    ['--mpi-args=-x A --oversubscribe', '--prague', 'smart', 'python']
    """
    i = 0
    while i < len(argv) and argv[i] != "--" and _is_option(parser, argv[i]):
        action, attached = _launcher_option(parser, argv[i])
        rest = argv[i + 1 :]
        if action is not None and action.dest == _dest("strategy") and not attached and rest:
            following = rest[0]
            if (
                following not in STRATEGIES
                and not _is_option(parser, following)
                and (shutil.which(following) or os.path.exists(following))
            ):
                return [*argv[: i + 1], DEFAULT_STRATEGY, *rest]
        i += 1 + _values_taken(parser, action, attached, rest)
    return argv


_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _is_option(parser: argparse.ArgumentParser, word: str) -> bool:
    """Whether argparse reads ``word`` as an option rather than a value or the command."""
    if len(word) < 2 or word[0] not in parser.prefix_chars:
        return False
    if word in parser._option_string_actions:
        return True
    if word.partition("=")[0] in parser._option_string_actions:  # "--mpi-args=-x Y", as argparse
        return True
    return not _NEGATIVE_NUMBER.match(word) and " " not in word


def _launcher_option(
    parser: argparse.ArgumentParser, word: str
) -> tuple[argparse.Action | None, bool]:
    """The action of the option ``word`` (None where argparse would refuse it), and whether
    ``word`` carries its value (``--opt=value``, ``-p22``)."""
    actions = parser._option_string_actions
    if word in actions:
        return actions[word], False
    name, equals, _ = word.partition("=")
    if equals and name in actions:
        return actions[name], True
    if parser.allow_abbrev and name.startswith(parser.prefix_chars[0] * 2):
        matches = {id(a): a for option, a in actions.items() if option.startswith(name)}
        if len(matches) == 1:
            return next(iter(matches.values())), bool(equals)
        if matches:
            return None, False  # ambiguous: argparse refuses it
    if word[1] not in parser.prefix_chars and word[:2] in actions:
        return actions[word[:2]], True
    return None, False


def _values_taken(
    parser: argparse.ArgumentParser,
    action: argparse.Action | None,
    attached: bool,
    rest: list[str],
) -> int:
    """How many words of ``rest`` argparse gives the option ``action`` as its values."""
    if action is None or attached:
        return 0
    if action.nargs in (argparse.REMAINDER, argparse.PARSER):
        return len(rest)
    available = 0
    while available < len(rest) and rest[available] != "--":
        if _is_option(parser, rest[available]):
            break
        available += 1
    if action.nargs is None or action.nargs == argparse.OPTIONAL:
        return min(1, available)
    if isinstance(action.nargs, int):
        return min(action.nargs, available)
    return available  # ZERO_OR_MORE, ONE_OR_MORE


def set_env(env: dict[str, str], args: argparse.Namespace) -> None:
    """Put the Prague options given on the command line into the workers' environment, and,
    for an MPI job on several hosts, the ranks on each (``NODES_VAR``): with the flag or
    without it, since a script may use the explicit API (stock Horovod never reads it)."""
    for name, value in given(args).items():
        env[ENV_PREFIX + name.upper()] = str(value)
    elastic = _elastic(args)
    # Under Gloo every rank reads the layout from the rendezvous store instead.
    if not elastic and not getattr(args, "use_gloo", False):
        topology = _topology(args)
        if topology is not None and topology.cross_size > 1:
            env[NODES_VAR] = ",".join(map(str, topology.node_sizes))


def _elastic(args: argparse.Namespace) -> bool:
    """Whether ``horovodrun`` runs the job under Horovod elastic, as its launcher decides."""
    return (
        getattr(args, "min_num_proc", None) is not None
        or getattr(args, "host_discovery_script", None) is not None
    )


def hook_installed() -> bool:
    """Whether this environment's site-packages has the drop-in's ``.pth`` file."""
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any(os.path.exists(os.path.join(d, HOOK_FILE)) for d in dirs)


def _topology(args: argparse.Namespace) -> Topology | None:
    """The job's shape, where the command line fixes it: ``-np`` ranks on one host, or on
    the hosts of ``-H`` (or of the host file, once horovodrun has read it), filled in turn as
    ``mpirun -map-by slot`` fills them."""
    num_proc = getattr(args, "num_proc", None)
    if not num_proc:
        return None
    hosts = getattr(args, "hosts", None)
    if not hosts:
        return None if getattr(args, "hostfile", None) else Topology(num_proc, num_proc)
    try:
        sizes = node_sizes_of(hosts, num_proc)
    except ValueError:  # a host's slots are not a number: horovodrun's own parser says so
        return None
    return None if sizes is None else Topology.of_nodes(sizes)


def _name_flag(message: str) -> str:
    """Config errors start with the option's name; say the flag instead."""
    match = re.match(r"(\w+): ", message)
    name = match.group(1) if match else ""
    if name in HELP:
        return f"{flag(name)} ({ENV_PREFIX}{name.upper()})" + message[len(name) :]
    return message

"""Prague options: one dataclass, read from keyword arguments or ``HOROVOD_PRAGUE_*`` variables.

Example::

    >>> cfg = PragueConfig.from_sources({"group_size": 2}, env={"HOROVOD_PRAGUE_SEED": "7"})
    >>> cfg.strategy, cfg.group_size, cfg.seed
    ('smart', 2, 7)

Keyword arguments win over environment variables, which win over the defaults.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

ENV_PREFIX = "HOROVOD_PRAGUE_"
AUTO = "auto"
SMALL_JOB = 4
"""With one average in flight, jobs of up to this many ranks run ``staleness=auto`` at 2,
larger ones at 1: measured under the paper's slowdown model, 2 reached the bound at n = 4 with
no accuracy lost, while at n = 8 it cost about a point and 1 matched All-Reduce. With more
than one in flight, ``auto`` is 1 at every size: the second average already removes the wait
that a larger staleness buys off (docs/results/earlier/lone-steps.md)."""
LARGE_JOB = 16
"""Jobs of this many ranks or more average in groups of 4 when ``group_size`` is 0 (auto),
smaller ones in pairs: on 4 hosts x 4 ranks under the random slowdown, groups of 4 ended 1.4
to 2.5 points of accuracy closer to All-Reduce's than pairs, about 10% slower; at n = 8 pairs
were level with All-Reduce (docs/results/earlier/group-size-at-16-ranks.md)."""
MOMENTUM_CORRECTION = 0.2
"""``momentum_correction=auto``: in the benchmark's model of 16 ranks, each on a fixed shard,
it took the accuracy gap to All-Reduce from 2.8 to 0.5 points (8 seeds), and left it where it
was with shards drawn anew each pass; 0.3 did as well on fixed shards and less well on
redrawn ones (docs/results/earlier/momentum-correction-model.md)."""
MEASURED_MOMENTUM = 0.9
"""The momentum coefficient ``momentum_correction`` was measured with (``share_at``)."""
STRATEGIES = ("smart", "static", "random", "adpsgd", "allreduce")
MAX_TIMEOUT = 7 * 24 * 3600.0
"""The longest ``timeout`` accepted, a week: far longer than any wait a job means to allow,
and far inside what socket timeouts and thread waits can hold (``threading.TIMEOUT_MAX``:
about 292 years on Linux)."""

HELP = {
    "strategy": "how the Group Generator forms groups: " + ", ".join(STRATEGIES),
    "group_size": "ranks per group, from 2 to the number of ranks; 0 (auto): 2, or 4 in jobs "
    f"of {LARGE_JOB} ranks or more (adpsgd: always 2; static: where 4 divides the ranks)",
    "threshold": "smart strategy: a rank lagging the requester by this many steps or more is "
    "kept out of its group (0 turns the rule off)",
    "sync_every": "a global average of the model every this many optimizer steps (0 = never)",
    "seed": "seeds the pool of divisions and the Group Generator's random choices",
    "pool_size": "divisions registered as Horovod process sets at init; each rank is in one "
    "set per division",
    "staleness": "steps an overlapped group average may run behind: started at the end of "
    "step t, it is applied by the end of step t + staleness (steps between that find it "
    "running average with nobody); 0 waits at once (the paper's blocking P-Reduce); auto: 1, "
    "or 2 on jobs of up to 4 ranks with in_flight 1",
    "in_flight": "overlapped group averages a rank may have running at once, never two "
    "sharing a partner; with more than 1 a step whose last average still runs starts the "
    "next instead of averaging with nobody, and staleness counts from when this many run",
    "timeout": "seconds any wait on the Group Generator may take before it raises (above 0, "
    "at most 604800: a week)",
    "weighting": "how an average weighs its members' models: progress, each by the number "
    "of steps its rank has taken (a straggler's model pulls its partners back less); or "
    "equal, the plain mean",
    "momentum_correction": "SGD or RMSprop with momentum (PyTorch, tf-keras): the share of "
    "each group average's move of a parameter that its momentum buffer takes too, as if the "
    "move had been a step, so a rank's momentum stops pulling its model back toward its own "
    f"data; from 0 (off) to 1; auto: {MOMENTUM_CORRECTION}",
    "adam_correction": "on (PyTorch): Adam's and AdamW's local steps are lengthened to the "
    "step they would take on the mean of all ranks' gradients, as under All-Reduce, by a "
    "factor from 1 to sqrt(ranks) measured from the optimizer's own moments; off",
    "epoch_consensus": "on: the end of each training epoch runs a global average first, so "
    "the script evaluates one model on every rank (PyTorch: a DataLoader's pass over a "
    "DistributedSampler or ElasticSampler of every rank; Keras: fit's validation); off",
    "own_pace": "on (PyTorch): each training pass over a DistributedSampler of every rank "
    "gives each rank a share of the epoch's samples that follows its speed measured over the "
    "previous pass, in the same number of batches on every rank (a slow rank's batches are "
    "smaller); off: the sampler's equal split",
    "coordinator_addr": "address rank 0 advertises for its Group Generator (empty = choose)",
    "coordinator_port": "port the Group Generator listens on (0 = any free port)",
}


@dataclasses.dataclass(frozen=True)
class PragueConfig:
    """Every Prague option, with its default; ``HELP`` says what each one does."""

    strategy: str = "smart"
    group_size: int = 0
    threshold: int = 2
    sync_every: int = 0
    seed: int = 0
    pool_size: int = 3
    staleness: str = AUTO
    in_flight: int = 2
    timeout: float = 60.0
    weighting: str = "progress"
    momentum_correction: str = AUTO
    adam_correction: str = "on"
    epoch_consensus: str = "on"
    own_pace: str = "off"
    coordinator_addr: str = ""
    coordinator_port: int = 0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy: unknown strategy {self.strategy!r}; "
                f"choose one of {', '.join(STRATEGIES)}"
            )
        if self.group_size < 0 or self.group_size == 1:
            raise ValueError(f"group_size: must be 0 (auto) or at least 2, got {self.group_size}")
        if self.threshold < 0:
            raise ValueError(f"threshold: must be >= 0 (0 turns it off), got {self.threshold}")
        if self.sync_every < 0:
            raise ValueError(f"sync_every: must be >= 0 (0 = never), got {self.sync_every}")
        if self.pool_size < 1:
            raise ValueError(f"pool_size: must be at least 1, got {self.pool_size}")
        steps = self._auto_or_number("staleness", int, "a number of steps")
        if steps is not None and steps < 0:
            raise ValueError(f"staleness: must be >= 0 (0 = blocking), got {steps}")
        if self.in_flight < 1:
            raise ValueError(f"in_flight: must be at least 1, got {self.in_flight}")
        if not 0 < self.timeout <= MAX_TIMEOUT:
            raise ValueError(
                f"timeout: must be a number of seconds above 0 and at most {MAX_TIMEOUT:g} "
                f"(a week), got {self.timeout}"
            )
        if self.weighting not in ("equal", "progress"):
            raise ValueError(f"weighting: expected equal or progress, got {self.weighting!r}")
        share = self._auto_or_number("momentum_correction", float, "a share from 0 to 1")
        if share is not None and not 0.0 <= share <= 1.0:
            raise ValueError(f"momentum_correction: must be in [0, 1], got {share}")
        if self.adam_correction not in ("on", "off"):
            raise ValueError(f"adam_correction: expected on or off, got {self.adam_correction!r}")
        if self.epoch_consensus not in ("on", "off"):
            raise ValueError(f"epoch_consensus: expected on or off, got {self.epoch_consensus!r}")
        if self.own_pace not in ("on", "off"):
            raise ValueError(f"own_pace: expected on or off, got {self.own_pace!r}")
        if not 0 <= self.coordinator_port < 65536:
            raise ValueError(f"coordinator_port: must be in 0..65535, got {self.coordinator_port}")

    def _auto_or_number(
        self, option: str, kind: Callable[[str], float], expected: str
    ) -> float | None:
        """None for ``auto``; else the option's number, which it then holds in its normal
        form (``"01"`` becomes ``"1"``), or ValueError naming the option."""
        value = getattr(self, option)
        if value == AUTO:
            return None
        try:
            number = kind(str(value))
        except ValueError:
            raise ValueError(f"{option}: expected {AUTO!r} or {expected}, got {value!r}") from None
        object.__setattr__(self, option, str(number))
        return number

    @classmethod
    def from_sources(
        cls, kwargs: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> PragueConfig:
        """Keyword arguments over ``HOROVOD_PRAGUE_*`` variables over the defaults.

        A value refused is named by its option; one read from a variable, by the variable too.
        """
        env = os.environ if env is None else env
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        from_env: set[str] = set()
        for name, field in fields.items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = _parse(field.type, raw, ENV_PREFIX + name.upper())
                from_env.add(name)
        for name, value in (kwargs or {}).items():
            if name not in fields:
                raise TypeError(
                    f"unknown Prague option {name!r}; known options: {', '.join(sorted(fields))}"
                )
            if value is not None:
                values[name] = _parse(fields[name].type, value, name)
                from_env.discard(name)
        try:
            return cls(**values)
        except ValueError as e:
            option = str(e).partition(":")[0]
            if option not in from_env:
                raise
            variable = ENV_PREFIX + option.upper()
            raise ValueError(f"{e} (from {variable}={env[variable]!r})") from None

    def staleness_for(self, size: int) -> int:
        """The staleness a job of ``size`` ranks runs with.

        >>> PragueConfig().staleness_for(4), PragueConfig().staleness_for(8)
        (1, 1)
        >>> PragueConfig(in_flight=1).staleness_for(4), PragueConfig(in_flight=1).staleness_for(8)
        (2, 1)
        >>> PragueConfig(staleness="0").staleness_for(4)
        0
        """
        if self.staleness == AUTO:
            return 2 if size <= SMALL_JOB and self.in_flight == 1 else 1
        return int(self.staleness)

    def momentum_correction_set(self) -> bool:
        """Whether a share other than 0 was asked for (not ``auto``).

        >>> [PragueConfig(momentum_correction=v).momentum_correction_set() for v in ("0", "1")]
        [False, True]
        >>> PragueConfig().momentum_correction_set()
        False
        """
        return self.momentum_correction != AUTO and float(self.momentum_correction) > 0

    def momentum_share(self) -> float:
        """The share ``momentum_correction`` sets (``auto``: ``MOMENTUM_CORRECTION``).

        >>> [PragueConfig(momentum_correction=v).momentum_share() for v in ("auto", "0.5")]
        [0.2, 0.5]
        """
        if self.momentum_correction == AUTO:
            return MOMENTUM_CORRECTION
        return float(self.momentum_correction)

    def agreed(self) -> dict[str, Any]:
        """The options every rank must agree on (all but where rank 0 listens)."""
        options = dataclasses.asdict(self)
        for local_only in ("coordinator_addr", "coordinator_port"):
            options.pop(local_only)
        return options

    def fingerprint(self) -> str:
        """A short hash of ``agreed()``."""
        return hashlib.sha256(json.dumps(self.agreed(), sort_keys=True).encode()).hexdigest()[:16]

    def to_env(self) -> dict[str, str]:
        """The ``HOROVOD_PRAGUE_*`` variables that reproduce this config."""
        return {ENV_PREFIX + k.upper(): str(v) for k, v in dataclasses.asdict(self).items()}


def share_at(share: float, momentum: float) -> float:
    """``momentum_correction``'s share for an optimizer with this momentum coefficient.

    A buffer that takes ``share * move / lr`` (PyTorch's; Keras's, which holds the learning
    rate, takes ``share * move``) carries the model on by ``share * momentum /
    (1 - momentum)`` times the move over the steps that follow. The share was measured at
    momentum 0.9 (1.8 times the move at 0.2); above it the share is scaled down so that the
    move carried on stays near what was measured, below it the share is kept (less is
    carried on).

        >>> share_at(0.2, 0.9), share_at(0.2, 0.5), round(share_at(0.2, 0.99), 3)
        (0.2, 0.2, 0.02)
    """
    if not 0.0 <= momentum < 1.0:
        return 0.0
    return share * min(1.0, (1.0 - momentum) / (1.0 - MEASURED_MOMENTUM))


def _parse(type_name: Any, raw: Any, where: str) -> Any:
    kind = {"str": str, "int": int, "float": float}[str(type_name)]
    if kind is int and (isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer())):
        raise ValueError(f"{where}: expected an integer, got {raw!r}")
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected {kind.__name__}, got {raw!r}") from None

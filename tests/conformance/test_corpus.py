"""The conformance corpus: plain Horovod scripts, each run stock and with ``--prague``.

Every ``scripts/*.py`` but ``harness.py`` is a training script written the way Horovod's users
write them (it never imports this project). Each runs on 4 local ranks with Gloo, first as stock
Horovod, then with ``--prague`` added, both with the same random slowdown
(``CONFORMANCE_SLOW``), each in a fresh report folder and under a hard deadline. Both runs must
exit 0, every rank of a run must report the same model digest and metric, and Prague's metric
must be within the script's tolerance of stock's.

A script's header (its first 30 lines) says what to expect, in comment lines
``# conformance: key=value[, key=value...]``:

- ``metric=accuracy|loss`` and ``tolerance=<float>`` (required unless ``stock-fails``): Prague's
  metric may be lower (accuracy) or higher (loss) than stock's by at most the tolerance.
- ``stock-fails=<reason>``: the script fails under stock Horovod too; both runs must fail, and
  each text in double quotes in the reason must appear in both runs' output.
- ``prague-warns=<texts>`` (with ``stock-fails``): the script fails stock, but runs under
  ``--prague``, whose output must contain each text in double quotes (the warning that says
  what Prague does instead).
- ``known-gap=<reason>``: a parity gap Prague has on this script, measured and not yet
  closed: a shortfall beyond the tolerance is an expected failure (``xfail``); a run within
  it passes, since ``--prague``'s metric varies from run to run (the groups depend on timing)
  and a gap near the tolerance lands on either side of it.
- ``known-failure=<reason>``: a defect of Prague's on this script, found and not yet fixed:
  a failed ``--prague`` run is an expected failure (``xfail``, not strict: the defect shows
  on some runs only); a run that succeeds is checked as any other.
- ``np=<n>`` (default 4), ``framework=torch|tensorflow|keras`` (default torch; informational),
  ``args=<extra horovodrun arguments>`` (split as a shell would; paths relative to this folder,
  where the jobs run; several ``args=`` lines add up; with ``--host-discovery-script`` the
  test leaves out ``-H``, which Horovod refuses beside it); ``prague-args=<arguments>``, added
  to the ``--prague`` run only (Prague's options, where a script is meant to meet a path the
  defaults reach rarely).
- ``long=<reason>``: CI leaves the script out for time (marker ``long``; ``scripts/stress.sh``
  runs it); the reason names the tests that cover its path in CI.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent
# Every step sleeps 0.03 s, or 5 times that with probability 1/4 (overridable, e.g. for a seed).
SLOW = os.environ.get("CONFORMANCE_SLOW", "0.03,5,0.25")
DEADLINE_S = float(os.environ.get("CONFORMANCE_DEADLINE_S", "240"))
HEADER_LINES = 30
KEYS = (
    "metric",
    "tolerance",
    "stock-fails",
    "prague-warns",
    "known-gap",
    "known-failure",
    "np",
    "framework",
    "args",
    "prague-args",
    "long",
)
_KEY_AT = re.compile(r"(?:^|,)\s*(" + "|".join(re.escape(k) for k in KEYS) + r")\s*=")


@dataclasses.dataclass(frozen=True)
class Header:
    """What a script's ``# conformance:`` lines say."""

    metric: str | None = None
    tolerance: float | None = None
    stock_fails: str | None = None
    prague_warns: str | None = None
    known_gap: str | None = None
    known_failure: str | None = None
    np: int = 4
    framework: str = "torch"
    args: tuple[str, ...] = ()
    prague_args: tuple[str, ...] = ()
    long: str | None = None

    @property
    def expected_texts(self) -> list[str]:
        """The quoted texts of ``stock-fails``: both runs' output must contain each."""
        return re.findall(r'"([^"]+)"', self.stock_fails or "")


def parse_header(text: str, where: str = "script") -> Header:
    """The ``# conformance:`` settings of a script's first 30 lines.

    >>> h = parse_header("# conformance: metric=loss, tolerance=0.05\\n# conformance: np=2")
    >>> (h.metric, h.tolerance, h.np)
    ('loss', 0.05, 2)
    >>> parse_header('# conformance: stock-fails=needs a GPU: "on GPU", really').expected_texts
    ['on GPU']
    >>> parse_header("# conformance: metric=loss, tolerance=1, args=--min-np 4 --max-np 4").args
    ('--min-np', '4', '--max-np', '4')
    """
    found: dict[str, str] = {}
    for line in text.splitlines()[:HEADER_LINES]:
        m = re.match(r"\s*#\s*conformance:(.*)$", line)
        if not m:
            continue
        body = m.group(1).strip()
        starts = list(_KEY_AT.finditer(body))
        if not starts or starts[0].start() != 0:
            raise ValueError(f"{where}: cannot read {line.strip()!r}; keys are {', '.join(KEYS)}")
        for this, after in zip(starts, [*starts[1:], None], strict=True):
            key = this.group(1)
            # Free text (a reason, arguments) runs to the end of the line, commas included.
            free = (
                "stock-fails",
                "prague-warns",
                "known-gap",
                "known-failure",
                "args",
                "prague-args",
                "long",
            )
            end = None if key in free or after is None else after.start()
            value = body[this.end() : end].strip()
            # Several args= lines add up, so that long command lines fit the header.
            found[key] = f"{found[key]} {value}" if key == "args" and key in found else value
            if end is None:
                break
    try:
        header = Header(
            metric=found.get("metric"),
            tolerance=float(found["tolerance"]) if "tolerance" in found else None,
            stock_fails=found.get("stock-fails"),
            prague_warns=found.get("prague-warns"),
            known_gap=found.get("known-gap"),
            known_failure=found.get("known-failure"),
            np=int(found.get("np", 4)),
            framework=found.get("framework", "torch"),
            args=tuple(shlex.split(found.get("args", ""))),
            prague_args=tuple(shlex.split(found.get("prague-args", ""))),
            long=found.get("long"),
        )
    except ValueError as e:
        raise ValueError(f"{where}: a bad conformance value: {e}") from None
    if header.stock_fails is None:
        if header.metric not in ("accuracy", "loss") or header.tolerance is None:
            raise ValueError(
                f"{where}: needs '# conformance: metric=<accuracy|loss>, tolerance=<float>' "
                "(or stock-fails=<reason>) in its first 30 lines"
            )
    if header.framework not in ("torch", "tensorflow", "keras"):
        raise ValueError(f"{where}: framework={header.framework!r}; torch, tensorflow or keras")
    return header


def corpus() -> list[Path]:
    return sorted(p for p in SCRIPTS.glob("*.py") if p.name != "harness.py")


def _corpus_params() -> list:
    """The corpus as test parameters, a script whose header says ``long=`` marked ``long``
    (a header that cannot be read is not: its test reports the error)."""
    params = []
    for script in corpus():
        try:
            long = parse_header(script.read_text(), str(script)).long is not None
        except ValueError:
            long = False
        marks = [pytest.mark.long] if long else []
        params.append(pytest.param(script, id=script.stem, marks=marks))
    return params


@dataclasses.dataclass
class Run:
    """One finished run of a script."""

    what: str
    returncode: int | None
    """``None`` when the run outlived its deadline and was killed."""
    seconds: float
    log: Path
    reports: list[dict]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 6000) -> str:
        return f"{self.what}: the whole output is in {self.log}. Its end:\n{self.output()[-chars:]}"

    def outcome(self) -> str:
        if self.returncode is None:
            return f"killed at its {DEADLINE_S:g} s deadline"
        return f"exit {self.returncode} after {self.seconds:.1f} s"


def _kill_job(root_pid: int, marker: str) -> None:
    """Kill ``horovodrun`` and every worker it started. Gloo workers run in sessions of their
    own, so they are found by the report folder in their environment as well as by ancestry."""
    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(root_pid)
        procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        pass
    for p in psutil.process_iter():
        try:
            if p.environ().get("CONFORMANCE_OUT") == marker:
                procs[p.pid] = p
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for p in procs.values():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(procs.values()), timeout=10)


def _log_path(tmp_path: Path, name: str) -> Path:
    """Where a run's whole output goes: under ``PRAGUE_TEST_LOGS`` when set (CI keeps it),
    else in the test's temporary folder."""
    keep = os.environ.get("PRAGUE_TEST_LOGS")
    folder = Path(keep) if keep else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (f"{tmp_path.name}-{os.getpid()}-{name}.log" if keep else f"{name}.log")


def run_script(script: Path, header: Header, tmp_path: Path, prague: bool) -> Run:
    """Run ``script`` on ``header.np`` local ranks, stock or with ``--prague``."""
    name = "prague" if prague else "stock"
    out = tmp_path / f"{name}-reports"
    out.mkdir(parents=True)
    # Horovod takes the hosts from the discovery script in elastic mode, and refuses -H there.
    hosts = [] if "--host-discovery-script" in header.args else ["-H", f"localhost:{header.np}"]
    command = [
        str(BIN / "horovodrun"),
        "-np",
        str(header.np),
        *hosts,
        "--gloo",
        *(["--prague", *header.prague_args] if prague else []),
        *header.args,
        sys.executable,
        str(script.relative_to(HERE)),
    ]
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        # The checkout's package under --prague, even when the installed copy is older.
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "CONFORMANCE_SLOW": SLOW,
        "CONFORMANCE_OUT": str(out),
        "HOROVOD_GLOO_TIMEOUT_SECONDS": "90",
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    log = _log_path(tmp_path, name)
    start = time.monotonic()
    with log.open("w") as sink:
        sink.write(f"$ cd {HERE} && {shlex.join(command)}\n")
        sink.flush()
        proc = subprocess.Popen(
            command,
            cwd=HERE,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            _kill_job(proc.pid, str(out))
            proc.wait()
            returncode = None
        finally:
            # Workers that outlive horovodrun (a crash of the launcher) must not outlive the test.
            _kill_job(proc.pid, str(out))
    seconds = time.monotonic() - start
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]
    reports.sort(key=lambda r: r["rank"])
    what = f"{script.name} {'with --prague' if prague else 'stock'}"
    return Run(what, returncode, seconds, log, reports)


def check_reports(run: Run, np: int) -> tuple[str, float]:
    """Every rank reported, with one digest and one metric: (digest, metric)."""
    assert [r["rank"] for r in run.reports] == list(range(np)), (
        f"{run.what}: reports from ranks {[r['rank'] for r in run.reports]}, expected all "
        f"{np} ({run.outcome()})\n{run.tail()}"
    )
    digests = {r["digest"] for r in run.reports}
    assert len(digests) == 1, (
        f"{run.what}: the ranks' final models differ: "
        f"{[(r['rank'], r['digest'][:12]) for r in run.reports]}\n{run.tail()}"
    )
    metrics = [r["metric"] for r in run.reports]
    assert max(metrics) - min(metrics) <= 1e-6 * max(1.0, abs(metrics[0])), (
        f"{run.what}: the ranks report different metrics {metrics}\n{run.tail()}"
    )
    return digests.pop(), metrics[0]


@pytest.mark.multirank
@pytest.mark.parametrize("script", _corpus_params())
def test_script(script: Path, tmp_path: Path, record_property) -> None:
    header = parse_header(script.read_text(), str(script))
    stock = run_script(script, header, tmp_path, prague=False)
    record_property("stock_s", round(stock.seconds, 1))
    if header.stock_fails is not None:
        assert stock.returncode not in (0, None), (
            f"{stock.what} was expected to fail ({header.stock_fails}) but ended with "
            f"{stock.outcome()}\n{stock.tail()}"
        )
        for text in header.expected_texts:
            assert text in stock.output(), f"{stock.what}: no {text!r}\n{stock.tail()}"
    else:
        assert stock.returncode == 0, f"{stock.what} failed: {stock.outcome()}\n{stock.tail()}"
        _, stock_metric = check_reports(stock, header.np)

    prague = run_script(script, header, tmp_path, prague=True)
    record_property("prague_s", round(prague.seconds, 1))
    if header.prague_warns is not None:
        # Stock fails, Prague runs, saying what it did instead: a run as any other, and the
        # quoted texts in its output.
        assert prague.returncode == 0, f"{prague.what} failed: {prague.outcome()}\n{prague.tail()}"
        check_reports(prague, header.np)
        for text in re.findall(r'"([^"]+)"', header.prague_warns):
            assert text in prague.output(), f"{prague.what}: no {text!r}\n{prague.tail()}"
        return
    if header.stock_fails is not None:
        assert prague.returncode not in (0, None), (
            f"{prague.what} should fail as stock does ({header.stock_fails}), but ended with "
            f"{prague.outcome()}\n{prague.tail()}"
        )
        for text in header.expected_texts:
            assert text in prague.output(), (
                f"{prague.what} failed, but not as stock does: no {text!r}\n{prague.tail()}"
            )
        return
    if header.known_failure is not None and prague.returncode != 0:
        pytest.xfail(f"{prague.what}: {prague.outcome()}: {header.known_failure}")
    assert prague.returncode == 0, f"{prague.what} failed: {prague.outcome()}\n{prague.tail()}"
    _, prague_metric = check_reports(prague, header.np)
    assert header.tolerance is not None
    if header.metric == "accuracy":
        shortfall = stock_metric - prague_metric
    else:
        shortfall = prague_metric - stock_metric
    if header.known_gap is not None and shortfall > header.tolerance:
        pytest.xfail(f"{script.name}: {shortfall:.4f} worse than stock: {header.known_gap}")
    assert shortfall <= header.tolerance, (
        f"{script.name}: {header.metric} {prague_metric:.4f} with --prague against "
        f"{stock_metric:.4f} stock, {shortfall:.4f} worse; the tolerance is {header.tolerance}"
        f" (stock {stock.seconds:.1f} s, --prague {prague.seconds:.1f} s)\n{prague.tail(3000)}"
    )


def test_headers_are_readable() -> None:
    """Every script of the corpus has a header the test can read (fast: no job starts)."""
    scripts = corpus()
    assert scripts, f"no scripts in {SCRIPTS}"
    for script in scripts:
        parse_header(script.read_text(), str(script))


def test_slow_step_and_digest() -> None:
    """The harness's slowdown draws are fixed per (seed, rank, step) and its digest sees every
    byte of every tensor, under its name."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import harness
        import torch
    finally:
        sys.path.remove(str(SCRIPTS))
    delays = [harness.step_delay("0.03,5,0.25", 1, s) for s in range(400)]
    assert set(delays) == {0.03, 0.15}
    assert 0.15 < sum(d == 0.15 for d in delays) / len(delays) < 0.35
    assert delays != [harness.step_delay("0.03,5,0.25", 2, s) for s in range(400)]
    assert delays != [harness.step_delay("0.03,5,0.25,1", 1, s) for s in range(400)]
    with pytest.raises(ValueError, match="CONFORMANCE_SLOW"):
        harness.parse_slow("0.03,5")

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    before = harness.digest(model)
    assert harness.digest(model.state_dict()) == before
    assert harness.digest(copy.deepcopy(model).bfloat16()) != before
    assert harness.digest(copy.deepcopy(model)) == before
    with torch.no_grad():
        model[0].weight[1, 2] = torch.nextafter(model[0].weight[1, 2], torch.tensor(9.0))
    assert harness.digest(model) != before
    renamed = {f"x{k}": v for k, v in model.state_dict().items()}
    assert harness.digest(renamed) != harness.digest(model)

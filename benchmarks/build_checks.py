"""How long ``horovodrun`` takes to ask whether Horovod was built with Gloo, before it starts a
worker: Horovod's way (import each framework's extension in turn, TensorFlow first) against
``patches/0018``'s (load each extension's compiled library alone first), interleaved.

    .venv/bin/python benchmarks/build_checks.py --rounds 5

Each check runs as ``horovodrun`` runs it: in a forked process, the launcher waiting on it.
"""

from __future__ import annotations

import argparse
import statistics
import time

from horovod.common import util


def import_first() -> bool | None:
    """Horovod 0.28.1's ``gloo_built``: the first extension that imports answers."""
    for extension in util.EXTENSIONS:
        answer = util._check_extension_lambda(
            extension, lambda ext: ext.gloo_built(), "built with Gloo", False
        )
        if answer is not None:
            return answer
    return None


def library_first() -> bool | None:
    """The patched ``gloo_built``, uncached."""
    return util._built("gloo_built", "built with Gloo", False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ways = {"import each framework (Horovod)": import_first, "library alone": library_first}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    answers = set()
    for _ in range(args.rounds):
        for name, check in ways.items():
            start = time.perf_counter()
            answers.add(check())
            seconds[name].append(time.perf_counter() - start)
    if len(answers) != 1:
        raise SystemExit(f"the two ways answered differently: {answers}")
    for name, times in seconds.items():
        print(f"{name:32s} median {statistics.median(times):6.2f} s  ({len(times)} rounds)")
    before, after = (statistics.median(t) for t in seconds.values())
    print(f"gloo_built answered {answers.pop()}; the library alone is {before / after:.1f}x faster")


if __name__ == "__main__":
    main()

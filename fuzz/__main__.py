"""Run one fuzz target under atheris (libFuzzer):

    python -m fuzz TARGET [--runs N] [--rss-limit-mb MB] [--timeout S] [libFuzzer flags]
    python -m fuzz TARGET --replay FILE...      (run stored inputs once, with tracebacks)

New inputs go to a work directory (build/fuzz/TARGET, or --workdir); the stored corpus and
the regression inputs of the target are read as seeds and never written. A finding (an
escaping exception, a hang past --timeout, memory past --rss-limit-mb) stops the run with a
non-zero exit and saves the input as crash-*, timeout-* or oom-* in the work directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import atheris

from fuzz.corpus import corpus_dir, regressions_dir
from fuzz.targets import NAMES

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = REPO_ROOT / "build" / "fuzz"


def libfuzzer_args(target: str, workdir: Path, runs: int, rss_limit_mb: int, timeout_s: int,
                   extra: list[str]) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    seeds = [str(path) for path in (corpus_dir(target), regressions_dir(target))
             if path.is_dir()]
    # -rss_limit_mb is checked by a libFuzzer thread every second: the whole process's
    # resident memory, Python's and the native decoders' allocations alike.
    return [f"-runs={runs}", f"-rss_limit_mb={rss_limit_mb}", f"-timeout={timeout_s}",
            "-print_final_stats=1",
            f"-artifact_prefix={workdir}/", *extra, str(workdir), *seeds]


def replay(target: str, paths: list[Path]) -> None:
    """Run each input once; the first one that breaks the contract raises with its
    traceback."""
    from fuzz.targets import load

    check = load(target).check
    for path in paths:
        check(path.read_bytes())
        print(f"{path}: kept the contract")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", choices=NAMES)
    parser.add_argument("--runs", type=int, default=1_000_000,
                        help="inputs to run (default 1,000,000)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--timeout", type=int, default=10,
                        help="seconds one input may take before it counts as a hang")
    parser.add_argument("--workdir", type=Path, help="where new inputs and findings go")
    parser.add_argument("--replay", type=Path, nargs="+", metavar="FILE",
                        help="run these inputs through the target once, without fuzzing")
    # Anything else (-max_total_time=60, -seed=1, ...) goes to libFuzzer as it is.
    options, libfuzzer = parser.parse_known_args(argv)
    libfuzzer = [arg for arg in libfuzzer if arg != "--"]
    if options.replay:
        replay(options.target, options.replay)
        return
    workdir = options.workdir or DEFAULT_WORKDIR / options.target
    with atheris.instrument_imports(include=["moldau"]):
        from fuzz.targets import load
        module = load(options.target)
    args = libfuzzer_args(options.target, workdir, options.runs, options.rss_limit_mb,
                          options.timeout, libfuzzer)
    atheris.Setup([sys.argv[0], *args], module.check)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv[1:])

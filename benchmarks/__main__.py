"""``python -m benchmarks``: list the suites and run one.

    python -m benchmarks                      # the suites, their targets and what each needs
    python -m benchmarks ops                  # every target of a suite, with the figures' arguments
    python -m benchmarks ops --quick          # the cheap run of each target that has one
    python -m benchmarks ops --only cpu_kernel --print   # the commands, run nothing

Each target runs as its own process (``python -m benchmarks.<suite>.<module> ARGS``) from the
repository root; a quick run writes under a scratch folder, never over a committed figure.  A
target that cannot run here (no card, no peer, no ``../shared/data``) is skipped, saying why.
The exit status is 1 when any target that ran failed.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time

from benchmarks.harness.args import make_parser
from benchmarks.harness.suites import STUDIES, SUITES, Target, missing, summary, targets


def command(suite: str, target: Target, quick: bool, tmp: str) -> list[str]:
    args = target.quick if quick else target.args
    assert args is not None
    return [sys.executable, "-m", f"benchmarks.{suite}.{target.module}",
            *(a.replace("{tmp}", tmp) for a in args)]  # fmt: skip


def listing() -> str:
    lines = []
    for suite in (*SUITES, STUDIES):
        lines.append(summary(suite))
        for t in targets(suite):
            tags = ([] if t.quick is None else ["quick"]) + [f"needs {n}" for n in t.needs]
            lines.append(f"  {t.label():22s} {t.what}" + (f"  [{', '.join(tags)}]" if tags else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = make_parser(__doc__, __file__)
    p.add_argument("suite", nargs="?", help="one of: " + ", ".join(SUITES))
    p.add_argument("--quick", action="store_true", help="each target's cheap run")
    p.add_argument("--only", nargs="*", default=None, help="these targets of the suite")
    p.add_argument("--print", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    if args.suite is None:
        print(listing())
        return 0
    if args.suite == STUDIES:
        p.error(f"{STUDIES} are frozen: run one as python -m benchmarks.{STUDIES}.<name>")
    try:
        chosen = targets(args.suite)
    except KeyError as e:
        p.error(str(e.args[0]))
    if args.only:
        unknown = sorted(set(args.only) - {t.label() for t in chosen})
        if unknown:
            p.error(f"no target {', '.join(unknown)} in {args.suite}")
        chosen = [t for t in chosen if t.label() in args.only]
    results = []
    with tempfile.TemporaryDirectory(prefix=f"bench_{args.suite}_") as tmp:
        for t in chosen:
            why = "no quick run" if args.quick and t.quick is None else missing(t, args.quick)
            if why:
                results.append((t.label(), "skipped", why))
                print(f"[{args.suite}] {t.label()}: skipped ({why})", flush=True)
                continue
            cmd = command(args.suite, t, args.quick, tmp)
            shown = shlex.join(["python", *cmd[1:]])
            if args.print:
                print(shown)
                continue
            print(f"[{args.suite}] {t.label()}: {shown}", flush=True)
            t0 = time.monotonic()
            rc = subprocess.run(cmd).returncode
            took = f"{time.monotonic() - t0:.0f} s"
            results.append((t.label(), "ok" if rc == 0 else f"failed (status {rc})", took))
    if results and not args.print:
        print(f"\n{args.suite}{' (quick)' if args.quick else ''}:")
        for name, status, detail in results:
            print(f"  {name:22s} {status:20s} {detail}")
    return 1 if any(s.startswith("failed") for _, s, _ in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())

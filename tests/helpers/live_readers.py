"""A reader process for tests/integration/test_live_readers.py: the Python predict API in a loop.

``python tests/helpers/live_readers.py RUN STOP`` prints ``ready`` once its imports are done, waits
for ``RUN/checkpoints/best``, then reads run folder ``RUN`` with
:meth:`cmpnn_dist.predict.Predictor.from_checkpoint` and one prediction, in turns on the run
folder (its newest checkpoint, which the writer prunes) and twice on ``RUN/checkpoints/best``
until the file ``STOP`` exists.  Before a read of ``best`` it waits (up to 10 s) for the
writer to be inside a window of replacing ``best`` -- window 1: the new copy staged
(``.tmp-best-*``); window 2: the old ``best`` moved aside too (``.old-best-*``), the new one
not yet in place; one turn each -- and then reads at once, to land in that window.  An audit
hook records every file operation that would change something inside ``RUN`` (a rename,
delete, link, folder creation or an ``open`` for writing).  The last stdout line is a JSON
summary: reads, the failures (error text), the fallback lines printed per read (with the
window it waited for) and the changes attempted inside ``RUN``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

CHANGES = {
    "os.rename", "os.replace", "os.remove", "os.unlink", "os.rmdir", "shutil.rmtree",
    "os.mkdir", "os.link", "os.symlink", "os.truncate",
}  # fmt: skip
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# what the checkpoints folder holds inside the writer's two windows of replacing best
WINDOWS = {1: {".tmp-best-"}, 2: {".tmp-best-", ".old-best-"}}


def main(run: Path, stop: Path) -> dict:
    run = run.resolve()
    touched: list[str] = []

    def inside(path: object) -> bool:
        try:
            return Path(os.fsdecode(path)).resolve().is_relative_to(run)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False

    def hook(event: str, args: tuple) -> None:
        if event in CHANGES and any(inside(a) for a in args[:2]):
            touched.append(f"{event} {args[:2]}")
        elif event == "open" and args and inside(args[0]):
            mode, flags = args[1], args[2]
            if (isinstance(mode, str) and set(mode) & set("wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            ):
                touched.append(f"open {args}")

    from cmpnn_dist.predict import Predictor

    sys.addaudithook(hook)
    best = run / "checkpoints" / "best"
    print("ready", flush=True)  # imports done: the test starts the writer now
    while not (best / "manifest.json").exists() and not stop.exists():
        time.sleep(0.01)
    reads, failures, fallbacks = 0, [], []
    turn = 0
    while not stop.exists():
        target, window = run, None
        if turn % 3:  # wait (a while) for the writer to be inside window 1 or 2, then read best
            target, want, deadline = best, WINDOWS[turn % 3], time.monotonic() + 10.0
            while not stop.exists() and time.monotonic() < deadline:
                staged = {p.name[:10] for p in best.parent.iterdir()} & {".tmp-best-", ".old-best-"}
                if staged == want:
                    window = turn % 3
                    break
                time.sleep(0.005)
        turn += 1
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                p = Predictor.from_checkpoint(target, device="cpu")
                frame = p.predict(head="A::0", relation="t0", topk=3)
            assert list(frame["rank"]) == [1, 2, 3], frame
        except Exception as e:  # noqa: BLE001 - every failure is reported to the test
            failures.append(f"{target}: {type(e).__name__}: {e}")
        reads += 1
        lines = [ln for ln in err.getvalue().splitlines() if "instead" in ln]
        if lines:
            fallbacks.append({"target": str(target), "window": window, "lines": lines})
    return {"reads": reads, "failures": failures, "fallbacks": fallbacks, "touched": touched}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))), flush=True)

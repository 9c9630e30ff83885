"""The peer, NBFNet-PyG, run side by side with us by its own interpreter.

``../shared/peers/nbfnet-pyg/`` holds the peer patched to run on the CPU, its set-up script
(``setup.sh VENV`` builds its virtual environment), the script that prepares its copy of the
GraIL data, and ``peer_step.py``, which times its training steps the way our child processes
time ours.  The same machine, thread settings and load apply to both sides: every child starts
from :func:`clean_env` (no thread or OpenMP settings of the caller), and :class:`Burner` keeps
the other core busy for the "busy machine" condition.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# ../shared beside the checkout; CMPNN_SHARED_DIR for a checkout elsewhere (a git worktree)
SHARED = Path(os.environ.get("CMPNN_SHARED_DIR") or REPO.parent / "shared")
KIT = SHARED / "peers" / "nbfnet-pyg"
DATA = SHARED / "data"
DEFAULT_VENV = Path("/work/peer/venv")
THREAD_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def peer_status(venv: Path | None) -> tuple[Path | None, str]:
    """(the python of the peer's venv, '') or (None, why the peer is skipped)."""
    if not (KIT / "peer_step.py").is_file():
        return None, f"peer kit absent: {KIT} has no peer_step.py"
    if not DATA.is_dir():
        return None, f"reference data absent: {DATA}"
    if venv is None:
        return None, f"no peer venv given (build it with bash {KIT / 'setup.sh'} VENV)"
    py = venv / "bin" / "python"
    if not py.is_file():
        return None, f"{py} missing: build it with bash {KIT / 'setup.sh'} {venv}"
    return py, ""


def peer_python(venv: Path | None = DEFAULT_VENV) -> Path | None:
    """The peer's interpreter where it is set up, else ``None``."""
    return peer_status(venv)[0]


def prepare_data(storage: Path) -> Path:
    """The peer's copy of the GraIL data under ``storage`` (made once by its own script)."""
    out = Path(storage) / "nbfnet-data"
    if not (out / "FB15k-237" / "v1" / "raw").is_dir():
        prep = ["bash", str(KIT / "prepare_data.sh"), str(DATA), str(out)]
        subprocess.run(prep, check=True, stdout=subprocess.DEVNULL)
    return out


def step_command(py: Path, data: Path, agg: str, steps: int) -> list[str]:
    """The peer's timed training steps (fb237_v1, ``agg`` sum or pna, one process)."""
    return [str(py), str(KIT / "peer_step.py"), str(data), agg, "1", str(steps), "0"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the caller's thread and OpenMP settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_SETTINGS}
    env.update(extra)
    return env


class Burner:
    """One busy-loop process (the "other core busy" condition), ending by itself after
    ``limit_s`` seconds if :meth:`stop` is never called."""

    def __init__(self, limit_s: float) -> None:
        code = f"import time\nend = time.monotonic() + {limit_s}\nwhile time.monotonic() < end: 0"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()

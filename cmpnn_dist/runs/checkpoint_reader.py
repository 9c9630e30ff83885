"""Reading checkpoints from outside their run: read-only, and safe beside the run writing them.

``evaluate``, ``predict`` (command line and :class:`~cmpnn_dist.predict.Predictor`) and the
Ray evaluation workers read checkpoints without holding the run lock
(:class:`~cmpnn_dist.runs.folder.RunLock`).  They change nothing in a run folder's
``checkpoints``: only the process holding the lock repairs ``best``, drops interrupted writes
and prunes (:meth:`~cmpnn_dist.runs.checkpoint_store.CheckpointStore.resume_point` and
:meth:`~cmpnn_dist.runs.checkpoint_store.CheckpointStore.publish`).  A reader copes with
that process working beside it instead:

* **pruned under the reader**: with ``checkpoint.keep_last=1`` the newest checkpoint can be
  deleted between finding it and loading it;
* **``best`` half-published**: while ``best`` is replaced it is absent for a moment (moved to
  ``.old-best-*``, the staged ``.tmp-best-*`` not yet renamed), and it stays so after a run
  killed there, until that run's next start repairs it.

:func:`read_checkpoint` reads a checkpoint's manifest and every file it lists into memory,
checks each file's size and sha256 against that manifest, and loads ``state.pt`` from those
very bytes (``torch.load(weights_only=True)``), so what it returns is one complete checkpoint.
When the folder changed while being read (gone, replaced, its manifest different), or
``best`` is absent or incomplete while staged copies of it exist, it falls back to the newest
complete checkpoint of the run -- that lookup is retried up to :data:`ATTEMPTS` times, since
the newest can be pruned too -- and says which in one line.  A run folder (or its
``checkpoints``) is read at its newest complete checkpoint among the step folders and
``best`` (in the order of ``CheckpointStore.resume_candidates``): a corrupt newest step
falls back to ``best`` or an older step, said in one line naming what was skipped and why.
A checkpoint folder named itself that stays torn or corrupt while nothing changes is an
error, as is a path that does not exist.
"""

from __future__ import annotations

import hashlib
import io
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cmpnn_dist.errors import UsageError
from cmpnn_dist.storage import fs

from .checkpoint import MANIFEST, STATE_FILE, CheckpointError, load_state, parse_manifest
from .checkpoint_store import BEST_DIR, CHECKPOINTS_DIR, CheckpointStore

logger = logging.getLogger(__name__)

ATTEMPTS = 8  # lookups of the newest complete checkpoint before giving up
_SETTLE = (0.02, 0.05, 0.1)  # pauses before a failed read counts as a stable (corrupt) folder


class CheckpointGone(CheckpointError):
    """The checkpoint folder changed while being read (deleted, renamed or replaced)."""


@dataclass
class Loaded:
    """A checkpoint read whole: where it was read (local path or URI) and its state dict."""

    location: str
    state: dict[str, Any]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def read_checkpoint(path: str | Path, say: Callable[[str], None] = _say) -> Loaded:
    """Read the checkpoint at ``path``: a checkpoint folder (``<run>/checkpoints/step_N`` or
    ``.../best``), or a run folder or its ``checkpoints`` folder (the newest complete
    checkpoint); a local path or a URI.  Read-only; a fallback (see the module docstring) is
    announced with one ``say`` line.  UsageError / CheckpointError when nothing can be read."""
    loc = fs.normalize(path)
    parent = loc.rsplit("/", 1)[0]
    if fs.name(loc) == BEST_DIR and fs.name(parent) == CHECKPOINTS_DIR:
        return _read_best(loc, parent.rsplit("/", 1)[0], path, say)
    if fs.is_file(fs.join(loc, MANIFEST)):
        try:
            return _read(loc)
        except CheckpointGone:
            run = parent.rsplit("/", 1)[0] if fs.name(parent) == CHECKPOINTS_DIR else parent
            found = _newest_or_fail(run, path)
            say(f"{loc} was removed while being read (its run prunes old checkpoints): using "
                f"{found.location} instead")  # fmt: skip
            return found
    if not fs.exists(loc):
        raise UsageError(f"checkpoint path {path} does not exist")
    run = parent if fs.name(loc) == CHECKPOINTS_DIR else loc
    found, gone, skipped = _newest(run) if fs.is_dir(loc) else (None, None, [])
    if found is None:
        why = f": {'; '.join(skipped)}" if skipped else ""
        expected = "expected a checkpoint, run or checkpoints folder"
        raise UsageError(f"no valid checkpoint at {path} ({expected}){why}")
    if gone is not None:
        say(f"{gone} was removed while being read (its run prunes old checkpoints): using "
            f"{found.location} instead")  # fmt: skip
    elif skipped:
        say(f"using {found.location}, the newest valid checkpoint of {run}: skipped "
            f"{'; '.join(skipped)}")  # fmt: skip
    return found


def _read_best(best: str, run: str, path: str | Path, say: Callable[[str], None]) -> Loaded:
    """``best``, or -- when it is half-published -- the newest complete checkpoint."""
    store = CheckpointStore(run)
    for attempt in range(2):
        if fs.exists(best):
            try:
                return _read(best)
            except CheckpointGone:
                break  # replaced while being read
            except CheckpointError:
                if not _staged_best(store):
                    raise  # torn or corrupt, and no replacement under way
                break  # a replacement under way (an object store's move is not atomic)
        if _staged_best(store):
            break  # being replaced, or left half-replaced by a killed run
        if attempt or not fs.is_dir(store.root):
            raise UsageError(f"checkpoint path {path} does not exist")
        time.sleep(_SETTLE[0])  # absent, nothing staged: look once more (a swap just ended?)
    found = _newest_or_fail(run, path)
    say(f"{best} is being replaced by its run (or was left half-replaced by a killed one): "
        f"using {found.location} instead")  # fmt: skip
    return found


def _staged_best(store: CheckpointStore) -> list[str]:
    return [n for n in fs.list_dirs(store.root) if n.startswith((".tmp-best-", ".old-best-"))]


def _newest_or_fail(run: str, path: str | Path) -> Loaded:
    found, _, skipped = _newest(run)
    if found is None:
        why = f": {'; '.join(skipped)}" if skipped else ""
        raise UsageError(f"no valid checkpoint at {path} nor in its run folder {run}{why}")
    return found


def _newest(run: str) -> tuple[Loaded | None, str | None, list[str]]:
    """``(the newest complete checkpoint of run folder run -- step folders and best -- or
    None, the first one that vanished while being read or None, why each torn one was
    skipped)``.  The listing is retried when one vanishes (a newer one was published)."""
    store = CheckpointStore(run)
    skipped: dict[str, str] = {}
    gone: str | None = None
    for attempt in range(ATTEMPTS):
        for _step, uri in store.resume_candidates():
            try:
                return _read(uri), gone, list(skipped.values())
            except CheckpointGone:
                gone = gone or uri
                break
            except CheckpointError as e:
                skipped.setdefault(uri, str(e))
                logger.debug("skipping invalid checkpoint %s: %s", uri, e)
        else:
            return None, gone, list(skipped.values())
        time.sleep(_SETTLE[0] * attempt)
    raise UsageError(
        f"no checkpoint of {run} stayed in place long enough to be read ({ATTEMPTS} tries): "
        "its run prunes them as fast as they are read (checkpoint.keep_last=1); try again, "
        "or read its checkpoints/best"
    )


def _read(location: str) -> Loaded:
    """Read checkpoint folder ``location`` whole (a URI through a private local copy)."""
    local = fs.local_path(location)
    if local is not None:
        return Loaded(location, _read_local(local))
    before = _remote_manifest(location)
    store = CheckpointStore(location.rsplit("/", 1)[0], scratch_tag="read")
    try:
        return Loaded(location, _read_local(store.local(location)))
    except (CheckpointError, OSError) as e:
        if _remote_manifest(location) != before or not fs.exists(location):
            raise CheckpointGone(f"{location}: changed while being read ({e})") from None
        if before is None:
            raise CheckpointError(f"{location}/{MANIFEST}: manifest missing") from None
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{location}: cannot be read ({e})") from None
    finally:
        store.close()  # the private copy goes with the store's scratch folder


def _remote_manifest(location: str) -> bytes | None:
    try:
        return fs.read_text(fs.join(location, MANIFEST)).encode()
    except (OSError, ValueError):
        return None


def _read_local(folder: Path) -> dict[str, Any]:
    """The state of local checkpoint ``folder``: manifest and files read once, each checked
    (size, sha256) and ``state.pt`` loaded from the bytes checked.  CheckpointGone when the
    folder changed meanwhile, CheckpointError when it is torn or corrupt."""
    try:
        inode = folder.stat().st_ino
    except FileNotFoundError:
        raise CheckpointGone(f"{folder}: gone") from None
    text: bytes | None = None
    try:
        mpath = folder / MANIFEST
        try:
            text = mpath.read_bytes()
        except FileNotFoundError:
            raise CheckpointError(f"{mpath}: manifest missing (checkpoint incomplete)") from None
        manifest = parse_manifest(text, mpath)
        blobs = {name: _checked(folder / name, info) for name, info in manifest["files"].items()}
        if STATE_FILE not in blobs:
            raise CheckpointError(f"{mpath}: lists no {STATE_FILE}")
        return load_state(io.BytesIO(blobs[STATE_FILE]), folder / STATE_FILE)
    except (CheckpointError, OSError) as e:
        if _changed(folder, inode, text):
            raise CheckpointGone(f"{folder}: changed while being read ({e})") from None
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{folder}: cannot be read ({e.strerror or e})") from None


def _checked(path: Path, info: dict[str, Any]) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: listed in the manifest but missing") from None
    if len(data) != info["size"]:
        raise CheckpointError(
            f"{path}: size {len(data)} bytes, manifest says {info['size']} (truncated?)"
        )
    if hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise CheckpointError(f"{path}: sha256 does not match the manifest (corrupt)")
    return data


def _changed(folder: Path, inode: int, manifest: bytes | None) -> bool:
    """Whether ``folder`` is gone, replaced, or has another manifest than ``manifest`` -- now
    or after short pauses (a folder being deleted loses its files before it disappears)."""
    for pause in (0.0, *_SETTLE):
        time.sleep(pause)
        try:
            if folder.stat().st_ino != inode:
                return True
            now: bytes | None = (folder / MANIFEST).read_bytes()
        except FileNotFoundError:
            now = None
            if not folder.exists():
                return True
        if now != manifest:
            return True
    return False

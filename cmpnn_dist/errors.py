"""The one user-error type of the library.

Every library module raises :class:`UsageError` (or a subclass: ``ConfigError``,
``StorageError``, ``CheckpointError``, ``DistributedTrainingError``) for input a person must
fix: a bad config value, a missing or broken data file, a checkpoint that does not fit.  The
message names the key, file or line.  Only the command-line plumbing (:mod:`cmpnn_dist.cli`)
turns it into one ``error: <message>`` line and exit status 2; libraries never print it or
exit.  This module imports nothing, so every layer may import it.
"""

from __future__ import annotations


class UsageError(Exception):
    """A user mistake (bad config, missing data, unusable checkpoint): one line, exit status 2
    in the CLIs.  The message names what to fix."""


__all__ = ["UsageError"]

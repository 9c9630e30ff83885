"""Runs: where a run lives and what it leaves, read and written without the training loop.

* :mod:`~cmpnn_dist.runs.folder`: the storage root, the run's name
  (:func:`~cmpnn_dist.runs.folder.default_run_name`), its folder, lock and first lines;
* :mod:`~cmpnn_dist.runs.start`: ``prepare(cfg)``, the checks of a start, once, for a run in
  this process and for one on Ray (with :mod:`~cmpnn_dist.runs.preflight`'s rules);
* :mod:`~cmpnn_dist.runs.checkpoint`, :mod:`~cmpnn_dist.runs.checkpoint_store`,
  :mod:`~cmpnn_dist.runs.checkpoint_reader`: a checkpoint's files, the run's store of them
  (atomic, pruned, verified) and the read-only reader beside a live run;
* :mod:`~cmpnn_dist.runs.restore`, :mod:`~cmpnn_dist.runs.resume_keys`: a checkpoint's config and
  model, and the rules a resume must meet;
* :mod:`~cmpnn_dist.runs.load`: ``load_model(path)``, a checkpoint to a model in eval mode and
  its dataset (for ``predict``, ``serve`` and ``evaluate``: none of them imports
  :mod:`cmpnn_dist.training`);
* :mod:`~cmpnn_dist.runs.sweep`: a sweep's cells (Hydra's multirun syntax) and their report;
* :mod:`~cmpnn_dist.runs.processes`, :mod:`~cmpnn_dist.runs.writer_lock`: which process
  writes a run.
"""

"""Mutation check: plant one-line bugs in the product and see whether the tests catch them.

Each entry of :data:`MUTATIONS` names a product file, a unique piece of one of its lines, the
text that replaces it (the planted bug), what the bug does, and the tests that should fail
with it (pytest arguments: node ids, or a file with ``-k``; fast default-tier tests where
one can catch the bug).  The runner copies the repository's files (``git ls-files``:
tracked and untracked, not ignored) into a temporary folder once, then for each mutation
applies it there (the piece must occur exactly once, else the list is stale and the run
stops), runs its tests in the copy with ``PYTHONPATH`` pointing at it, records *caught*
(a test failed) or *survived* (every test passed) and the time, and restores the file.

    python tests/mutation_check.py                 # every mutation, then the results files
    python tests/mutation_check.py --only NAME     # one mutation (no results files)
    python tests/mutation_check.py --list          # the mutations and their tests
    python tests/mutation_check.py --integration   # also the tests that need --integration

Results: ``benchmarks/results/house/mutation_check.md`` and ``.json`` (a full run only).  Not a
test module (no ``test_`` prefix): pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path


@dataclass(frozen=True)
class Mutation:
    """One planted bug: ``old`` (a piece of one line of ``path``, unique in the file) becomes
    ``new``; ``tests``: pytest selections (each one string of arguments) that should fail;
    ``integration``: selections that need ``--integration`` (run with the flag only)."""

    name: str
    area: str
    path: str
    old: str
    new: str
    bug: str
    tests: tuple[str, ...]
    integration: tuple[str, ...] = field(default=())


# fmt: off
MUTATIONS: list[Mutation] = [
    # ------------------------------------------------------------------ storage
    Mutation(
        "csr_inverse_relation", "storage", "cmpnn_dist/storage/csr.py",
        "| (r + num_relations)", "| r",
        "inverse edges get the forward relation id instead of r + |R|",
        ("tests/unit/storage/test_storage_format.py::test_fast_csr_equals_reference",),
    ),
    Mutation(
        "shard_offsets_not_shifted", "storage", "cmpnn_dist/storage/reader.py",
        "offs.append(s.indptr[:-1] + total)", "offs.append(s.indptr[:-1])",
        "a graph of several shards keeps each shard's local row offsets",
        ("tests/unit/storage/test_storage_format.py::test_roundtrip_equals_numpy",),
    ),
    Mutation(
        "shard_id_range_inclusive", "storage", "cmpnn_dist/storage/reader.py",
        "int(hi) < upper", "int(hi) <= upper",
        "a source or relation id equal to the bound passes the structural check",
        ("tests/unit/storage/test_storage_errors.py::test_structural_checks_on_open",),
    ),
    Mutation(
        "stamp_ignores_ctime", "storage", "cmpnn_dist/storage/integrity.py",
        '"ctime_ns": st.st_ctime_ns,', '"ctime_ns": 0,',
        "the verification stamp trusts a file rewritten with its size and mtime restored",
        ("tests/unit/storage/test_shard_verify.py::test_stamp_spares_the_hash_until_a_file_changes",),
    ),
    Mutation(
        "stamp_fresh_files", "storage", "cmpnn_dist/storage/integrity.py",
        "if now - st.st_ctime_ns > SETTLE_NS:", "if now - st.st_ctime_ns < SETTLE_NS:",
        "files changed just now are stamped, settled ones are not",
        ("tests/unit/storage/test_shard_verify.py::test_files_changed_just_now_are_hashed_every_time",),
    ),
    Mutation(
        "append_overwrites", "storage", "cmpnn_dist/storage/atomic.py",
        "write_all(fd, raw, size)", "write_all(fd, raw, 0)",
        "append_text writes at the start of the file instead of its end",
        ("tests/unit/storage/test_atomic_writes.py::test_write_atomic_replaces_whole",),
    ),
    # ------------------------------------------------------------------ ops
    Mutation(
        "sumsq_gradient", "ops", "cmpnn_dist/ops/chunked.py",
        "msg, value=2.0)", "msg, value=1.0)",
        "the sum-of-squares reduction's gradient is m instead of 2 m",
        ("tests/unit/ops/test_ops_reference.py::test_reference_matches_naive_values_and_gradients"
         " -k 16777216-False",),
    ),
    Mutation(
        "max_ties_not_split", "ops", "cmpnn_dist/ops/chunked.py",
        "hit.div_(gather(ties[a], d, 5)).mul_(gather(g[a], d, 5))",
        "hit.mul_(gather(g[a], d, 5))",
        "a max / min gradient goes whole to every tied message instead of being shared",
        ("tests/unit/ops/test_ops_reference.py::test_reference_matches_naive_with_tied_messages",),
    ),
    Mutation(
        "isolated_nodes_keep_inf", "ops", "cmpnn_dist/ops/chunked.py",
        "empty = (degree == 0).view(-1, 1, 1)", "empty = (degree < 0).view(-1, 1, 1)",
        "max / min of a node without in-edges stay -inf / +inf instead of 0",
        ("tests/unit/ops/test_ops_reference.py::test_reference_matches_naive_values_and_gradients"
         " -k 16777216-False",),
    ),
    Mutation(
        "cpu_per_query_weights_layout", "ops", "cmpnn_dist/ops/cpu.py",
        "else ew.transpose(0, 1).contiguous()",
        "else ew.reshape(ew.shape[1], ew.shape[0]).contiguous()",
        "per-query edge weights [B, E] handed to the compiled kernel reshaped, not transposed",
        ("tests/unit/ops/test_ops_cpu.py::test_cpu_matches_naive -k per_query",),
    ),
    Mutation(
        "basis_message_transposed", "ops", "cmpnn_dist/ops/messages.py",
        "torch.bmm(x_src, weights.transpose(1, 2))", "torch.bmm(x_src, weights)",
        "the basis message (the generic path and the naive oracle) computes W_r^T x, not W_r x",
        ("tests/unit/ops/test_ops_reference.py::test_reference_matches_naive_values_and_gradients"
         " -k 16777216-False-basis",),
    ),
    # ------------------------------------------------------------------ model
    Mutation(
        "readout_sets_swapped", "model", "cmpnn_dist/model/readout.py",
        "for nodes in (graph.dst(), graph.src):", "for nodes in (graph.src, graph.dst()):",
        "the relation readout's V_q^+ and V_q^- are swapped",
        ("tests/unit/model/test_model_slow_reference.py::test_batched_equals_per_pair"
         " -k relation",),
    ),
    Mutation(
        "relu_before_norm", "model", "cmpnn_dist/model/layer.py",
        "out = torch.relu(self.norm(pre))", "out = self.norm(torch.relu(pre))",
        "the layer applies ReLU before the layer norm",
        ("tests/unit/model/test_model_slow_reference.py::test_batched_equals_per_pair -k mean",),
    ),
    Mutation(
        "shortcut_adds_history", "model", "cmpnn_dist/model/layer.py",
        "return out + h if self.shortcut else out",
        "return out + h_hist if self.shortcut else out",
        "the shortcut adds h^{f(t)} instead of h^(t)",
        ("tests/unit/model/test_model_slow_reference.py::test_batched_equals_per_pair -k mean",),
    ),
    Mutation(
        "init_replaces_noise", "model", "cmpnn_dist/model/init.py",
        "accumulate=True", "accumulate=False",
        "INIT overwrites the uniform noise at the source instead of adding to it",
        ("tests/unit/model/test_model.py::test_uniform_init_noise_is_the_paper_codes_boundary",),
    ),
    Mutation(
        "init3_without_noise", "model", "cmpnn_dist/model/init.py",
        "return z_q + torch.randn_like(z_q)", "return z_q + torch.zeros_like(z_q)",
        "INIT 3 draws no noise (it becomes INIT 2)",
        ("tests/unit/model/test_model.py::test_init3_draws_fresh_noise_each_forward",),
    ),
    Mutation(
        "decoder_without_bias", "model", "cmpnn_dist/model/decoder.py",
        "self.hidden.weight[:, self.dim :], self.hidden.bias)",
        "self.hidden.weight[:, self.dim :])",
        "the decoder's hidden layer loses its bias",
        ("tests/unit/model/test_model_slow_reference.py::test_batched_equals_per_pair -k mean",),
    ),
    Mutation(
        "query_inverse_edge_kept", "model", "cmpnn_dist/graph.py",
        "self._triple_key(t_fwd, r_fwd + half, h_fwd),",
        "self._triple_key(t_fwd, r_fwd, h_fwd),",
        "query-edge removal keeps the query fact's inverse edge",
        ("tests/unit/test_graph.py::test_query_removes_the_fact_and_its_inverse_given_either_direction",),
    ),
    Mutation(
        "edge_mask_one_past_run", "model", "cmpnn_dist/graph.py",
        "hit = pos < hi[:, None]", "hit = pos <= hi[:, None]",
        "the query-edge mask also removes the edge after each matching run",
        ("tests/unit/test_graph.py",),
    ),
    # ------------------------------------------------------------------ training
    Mutation(
        "uniform_negative_weights", "training", "cmpnn_dist/training/builders.py",
        "self_adversarial_bce(pos, neg, temperature)",
        'self_adversarial_bce(pos, neg, float("inf"))',
        "the loss weights every negative alike (train.adversarial_temperature ignored)",
        ("tests/unit/training/test_training_builders.py::"
         "test_loss_weights_negatives_by_the_configured_temperature",),
    ),
    Mutation(
        "adversarial_weights_not_detached", "training", "cmpnn_dist/training/loss.py",
        "torch.softmax(neg_logit.detach() / temperature", "torch.softmax(neg_logit / temperature",
        "gradients flow into the self-adversarial weights",
        ("tests/unit/training/test_training_loss.py",),
    ),
    Mutation(
        "sampler_inverse_filter", "training", "cmpnn_dist/training/sampler.py",
        "self._key(t, r + self.num_relations, h)", "self._key(t, r, h)",
        "head-prediction queries may draw true heads as negatives",
        ("tests/unit/training/test_sampler.py::test_negatives_are_strict",),
    ),
    Mutation(
        "sampler_inverse_types", "training", "cmpnn_dist/training/sampler.py",
        "seen[f[:, 1] + R, types[f[:, 0]]] = True", "seen[f[:, 1] + R, types[f[:, 2]]] = True",
        "typed negatives of an inverse relation come from the tails' types, not the heads'",
        ("tests/unit/training/test_sampler_typed.py",),
    ),
    Mutation(
        "sampler_same_epochs", "training", "cmpnn_dist/training/sampler.py",
        "np.random.default_rng([self.seed, self._epoch])", "np.random.default_rng(self.seed)",
        "every epoch repeats the first epoch's order, coins and negatives",
        ("tests/unit/training/test_sampler.py::test_epochs_and_seeds_differ_and_cover_the_facts",),
    ),
    Mutation(
        "warmup_starts_at_zero", "training", "cmpnn_dist/training/builders.py",
        "return (step + 1) / warmup", "return step / warmup",
        "the warmup's first update runs at learning rate 0",
        ("tests/unit/training/test_training_builders.py::test_lr_factor_by_hand",),
    ),
    Mutation(
        "schedule_not_restored", "training", "cmpnn_dist/training/trainer.py",
        'if state.get("scheduler") is not None:', "if False:",
        "a resumed run restarts its learning-rate schedule",
        ("tests/unit/training/test_training_builders.py::test_scheduled_run_resumes_bit_identically",),
    ),
    Mutation(
        "rng_not_restored", "training", "cmpnn_dist/training/trainer.py",
        'restore_rng_state(state["rng"])', "capture_rng_state()",
        "a resumed run does not restore the global RNGs (INIT 3's noise differs)",
        ("tests/unit/training/test_training.py::test_resume_after_crash_is_bit_identical",),
    ),
    # ------------------------------------------------------------------ evaluation
    Mutation(
        "target_counted_against_itself", "evaluation", "cmpnn_dist/evaluation/metrics.py",
        "negative[rows, target] = False", "negative[rows, target] = True",
        "the filtered rank counts the target as one of its own negatives",
        ("tests/unit/evaluation/test_metrics.py::test_filtered_rank_hand_example_with_ties_and_filter",),
    ),
    Mutation(
        "optimistic_ties", "evaluation", "cmpnn_dist/evaluation/metrics.py",
        "((scores >= target_score) & negative)", "((scores > target_score) & negative)",
        "ties rank the target above its tied candidates (optimistic, not pessimistic)",
        ("tests/unit/evaluation/test_metrics.py::test_filtered_rank_hand_example_with_ties_and_filter",),
    ),
    Mutation(
        "average_ties_full", "evaluation", "cmpnn_dist/evaluation/metrics.py",
        "equal.double() / 2", "equal.double()",
        "average ties count every tie whole",
        ("tests/unit/evaluation/test_eval_protocols.py -k average",),
    ),
    Mutation(
        "hits_at_10_strict", "evaluation", "cmpnn_dist/evaluation/metrics.py",
        '"hits@10": float((r <= 10)', '"hits@10": float((r < 10)',
        "Hits@10 leaves out rank 10",
        ("tests/unit/evaluation/test_metrics.py::test_ranking_metrics_hand_values",
         "tests/unit/evaluation/test_metrics.py::test_hits_at_k_counts_rank_k_itself"),
    ),
    Mutation(
        "hits_10_50_paper_rule", "evaluation", "cmpnn_dist/evaluation/metrics.py",
        "m, p = num_negatives, r / (n + 1)", "m, p = num_negatives, (r - 1) / (n + 1)",
        "the paper's hits@10_50 rule leaves the target out of its own ranking",
        ("tests/unit/evaluation/test_metrics.py::test_paper_rule_equals_the_paper_codes_evaluate",),
    ),
    Mutation(
        "head_direction_forward_relation", "evaluation", "cmpnn_dist/evaluation/ranking.py",
        "rels = torch.cat([queries[:, 1], queries[:, 1] + num_relations])",
        "rels = torch.cat([queries[:, 1], queries[:, 1]])",
        "head prediction is ranked with the forward relation instead of its inverse",
        ("tests/unit/evaluation/test_ranking.py::test_evaluate_equals_brute_force_both_directions",),
    ),
    Mutation(
        "filter_misses_inverse_answers", "evaluation", "cmpnn_dist/evaluation/answers.py",
        "t * self.r2 + r + num_relations", "t * self.r2 + r",
        "the filter indexes head-prediction answers under the forward relation",
        ("tests/unit/evaluation/test_ranking.py::test_answer_index_matches_python_sets",),
    ),
    # ------------------------------------------------------------------ distributed
    Mutation(
        "eval_batches_not_sharded", "distributed", "cmpnn_dist/evaluation/ranking.py",
        "mine = list(range(rank, num_batches, world_size))",
        "mine = list(range(0, num_batches, world_size))",
        "every evaluation worker scores rank 0's batches",
        ("tests/unit/evaluation/test_eval_protocols.py::test_group_batches_sharded_over_workers_equal_one_process",),
    ),
    Mutation(
        "sampler_rank_rows_overlap", "distributed", "cmpnn_dist/training/sampler.py",
        "lo, hi = self.rank * self.local_batch_size,",
        "lo, hi = self.rank,",
        "the ranks' shares of a global batch overlap (rank r starts at row r)",
        ("tests/unit/training/test_sampler.py::test_global_batches_same_for_any_world_size",),
    ),
    Mutation(
        "stop_request_repeated", "distributed", "cmpnn_dist/distributed/stop.py",
        "if stops.signum is not None and deadline is None:", "if stops.signum is not None:",
        "the driver passes a signal on to the workers again at every poll",
        ("tests/unit/distributed/test_stop_requests.py::test_a_signal_is_passed_on_once_and_fit_is_awaited",),
    ),
    Mutation(
        "stop_flag_last_wins", "distributed", "cmpnn_dist/distributed/stop.py",
        "if self._signum is None:", "if True:",
        "the stop flag keeps the last signal, not the first",
        ("tests/unit/distributed/test_stop_requests.py::test_the_stop_flag_keeps_the_first_request",),
    ),
    # ------------------------------------------------------------------ predict
    Mutation(
        "topk_ascending", "predict", "cmpnn_dist/predict/rank.py",
        'np.argsort(-masked.numpy(), axis=1, kind="stable")',
        'np.argsort(masked.numpy(), axis=1, kind="stable")',
        "top-k answers are the lowest-scoring candidates",
        ("tests/unit/predict/test_predict.py::test_known_facts_are_flagged_or_filtered",),
    ),
    Mutation(
        "train_facts_not_flagged", "predict", "cmpnn_dist/predict/rank.py",
        'KNOWN_NAMES = np.array(["", *SPLITS], dtype=object)',
        'KNOWN_NAMES = np.array(["", "", *SPLITS[1:]], dtype=object)',
        "answers that are training facts are not flagged as known",
        ("tests/unit/predict/test_predict.py::test_known_facts_are_flagged_or_filtered",),
    ),
    Mutation(
        "filter_keeps_train_facts", "predict", "cmpnn_dist/predict/rank.py",
        "keep = keep & (codes == 0)", "keep = keep & (codes <= 1)",
        'known="filter" keeps the answers that are training facts',
        ("tests/unit/predict/test_predict.py::test_known_facts_are_flagged_or_filtered",),
    ),
    Mutation(
        "head_candidates_tail_types", "predict", "cmpnn_dist/predict/predictor.py",
        "allowed[train[:, 1] + r, types[train[:, 0]]] = True",
        "allowed[train[:, 1] + r, types[train[:, 2]]] = True",
        "head prediction's candidates have the relation's tail types, not its head types",
        ("tests/unit/predict/test_predict.py::test_candidates_are_restricted_to_the_relations_target_types",),
    ),
    Mutation(
        "one_fact_rank_from_zero", "predict", "cmpnn_dist/predict/rank.py",
        "ranks[fact, 0] = 1 + (masked[fact] > s).sum(dim=1)",
        "ranks[fact, 0] = (masked[fact] > s).sum(dim=1)",
        "a given fact's rank starts at 0",
        ("tests/unit/predict/test_predict.py::test_one_fact_gets_its_rank_among_the_candidates",),
    ),
    # ------------------------------------------------------------------ serve
    Mutation(
        "batch_mask_of_first_request", "serve", "cmpnn_dist/predict/rank.py",
        "else candidates[members].bool()",
        "else candidates[members[:1].expand(members.numel())].bool()",
        "every request of a batch gets the candidate types of the batch's first (head, relation)",
        ("tests/unit/serve/test_serve_engine.py", "tests/unit/predict/test_rank.py"),
        integration=(
            "tests/integration/test_serve.py::test_a_batch_of_mixed_relations_and_tail_types_matches_the_python_api",
        ),
    ),
    Mutation(
        "tail_type_mask_inverted", "serve", "cmpnn_dist/predict/predictor.py",
        "(self.node_types.long()[None, :] == types)",
        "(self.node_types.long()[None, :] != types)",
        "tail_type keeps every type but the one asked for",
        ("tests/unit/serve/test_serve_engine.py",),
        integration=("tests/integration/test_serve.py::test_tail_type_restricts_the_candidates",),
    ),
]
# fmt: on

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "house"
TIMEOUT_S = 1800  # one mutation's tests


class StaleMutation(RuntimeError):
    """A mutation's piece of text does not occur exactly once in its file."""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout


def copy_checkout(dest: Path) -> None:
    """The repository's files (tracked, and untracked ones git does not ignore) under
    ``dest``; ``../shared`` (the reference graphs some tests read) linked beside it."""
    names = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, names):
        src = REPO / name
        if not src.is_file():  # deleted in the work tree, or a submodule
            continue
        out = dest / "repo" / name
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
    shared = REPO.parent / "shared"
    if shared.is_dir():
        (dest / "shared").symlink_to(shared)


def apply(root: Path, m: Mutation) -> bytes:
    """Plant ``m`` in the copy at ``root``; returns the file's original bytes."""
    path = root / m.path
    if not path.is_file():
        raise StaleMutation(f"{m.name}: {m.path} does not exist")
    raw = path.read_bytes()
    text = raw.decode()
    count = text.count(m.old)
    if count != 1:
        raise StaleMutation(
            f"{m.name}: {m.old!r} occurs {count} times in {m.path} (expected once): "
            "update the entry in tests/mutation_check.py"
        )
    path.write_text(text.replace(m.old, m.new))
    return raw


def missing_tests(root: Path, selection: str) -> list[str]:
    """The files / test functions a selection names that the copy does not have."""
    out = []
    for arg in shlex.split(selection):
        if not arg.startswith("tests/"):
            continue
        file, _, func = arg.partition("::")
        path = root / file
        if not path.is_file():
            out.append(file)
        elif func and f"def {func.split('[')[0]}(" not in path.read_text():
            out.append(arg)
    return out


def run_tests(root: Path, selections: list[str], integration: bool) -> tuple[int, str, float]:
    """``pytest -x`` over the selections in the copy: (exit status, output tail, seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    if integration:
        cmd.append("--integration")
    for sel in selections:
        cmd += shlex.split(sel)
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        code, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = -1, f"timed out after {TIMEOUT_S} s: {exc}"
    return code, output[-3000:], time.monotonic() - start


def verdict(code: int) -> str:
    """pytest's exit status -> caught (a test failed), survived (all passed) or error."""
    return {0: "survived", 1: "caught"}.get(code, "error")


def check_one(root: Path, m: Mutation, integration: bool) -> dict:
    selections = list(m.tests) + (list(m.integration) if integration else [])
    missing = [x for sel in selections for x in missing_tests(root, sel)]
    selections = [sel for sel in selections if not missing_tests(root, sel)]
    row = {"name": m.name, "area": m.area, "file": m.path, "bug": m.bug,
           "tests": selections, "missing_tests": missing}  # fmt: skip
    if not selections:
        row.update(result="error", seconds=0.0, output="none of its tests exists here")
        return row
    original = apply(root, m)
    try:
        code, output, seconds = run_tests(root, selections, integration)
    finally:
        (root / m.path).write_bytes(original)
    row.update(result=verdict(code), exit_status=code, seconds=round(seconds, 1))
    if row["result"] != "caught":
        row["output"] = output
    return row


def table(rows: list[dict]) -> str:
    lines = ["| mutation | area | planted bug | tests | result | s |", "|---|---|---|---|---|---|"]
    for r in rows:
        tests = "<br>".join(f"`{t}`" for t in r["tests"]) or "-"
        bug = r["bug"].replace("|", "\\|")  # a table cell
        lines.append(
            f"| `{r['name']}` | {r['area']} | {bug} | {tests} | {r['result']} "
            f"| {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def header(argv: list[str], load_before: tuple[float, ...]) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = _git("rev-parse", "HEAD").strip()
        if _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                ":!benchmarks/results").strip():  # fmt: skip
            commit += "+dirty"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "command": shlex.join(["python", "tests/mutation_check.py", *argv]),
        "machine": f"{cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}",
        "load": {"before": list(load_before), "after": list(os.getloadavg())},
        "commit": commit,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def write_results(head: dict, rows: list[dict]) -> None:
    caught = sum(r["result"] == "caught" for r in rows)
    summary = {"mutations": len(rows), "caught": caught,
               "survived": sum(r["result"] == "survived" for r in rows),
               "errors": sum(r["result"] == "error" for r in rows),
               "caught_fraction": round(caught / max(len(rows), 1), 3)}  # fmt: skip
    load = {k: ", ".join(f"{x:.1f}" for x in v) for k, v in head["load"].items()}
    minutes = sum(r["seconds"] for r in rows) / 60
    md = [
        "# Mutation check",
        "",
        f"- command: `{head['command']}`",
        f"- machine: {head['machine']}",
        f"- load (1, 5, 15 min): {load['before']} before; {load['after']} after",
        f"- commit: {head['commit']}",
        f"- date: {head['date']}",
        "",
        "One-line bugs planted in a copy of the checkout, one at a time; each runs the tests "
        "named beside it (`pytest -x`): *caught* when a test fails, *survived* when all pass. "
        "The list and the runner: `tests/mutation_check.py`.",
        "",
        f"**{caught} of {len(rows)} caught ({100 * summary['caught_fraction']:.0f} %)**, "
        f"{summary['survived']} survived, {summary['errors']} errors; {minutes:.0f} minutes of "
        "test runs.",
        "",
        table(rows),
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS / "mutation_check.md", "\n".join(md))
    data = {**head, "summary": summary, "mutations": rows}
    write_atomic(RESULTS / "mutation_check.json", json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="NAME", help="run this mutation only")
    ap.add_argument("--list", action="store_true", help="list the mutations and their tests")
    ap.add_argument("--check", action="store_true", help="only check that every mutation applies")
    ap.add_argument(
        "--integration", action="store_true", help="also run tests that need --integration"
    )
    args = ap.parse_args(argv)
    names = [m.name for m in MUTATIONS]
    if len(set(names)) != len(names):
        print("error: tests/mutation_check.py: two mutations share a name", file=sys.stderr)
        return 2
    if args.list:
        for m in MUTATIONS:
            extra = f"  [--integration: {', '.join(m.integration)}]" if m.integration else ""
            print(f"{m.name:34s} {m.area:12s} {m.path}\n    {m.bug}\n    "
                  f"{'; '.join(m.tests)}{extra}")  # fmt: skip
        return 0
    chosen = MUTATIONS
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            print(f"error: unknown mutation(s) {', '.join(unknown)}; see --list", file=sys.stderr)
            return 2
        chosen = [m for m in MUTATIONS if m.name in args.only]
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mutation_check_") as tmp:
        copy_checkout(Path(tmp))
        root = Path(tmp) / "repo"
        for m in chosen:  # every entry checked first: a stale list stops before any run
            (root / m.path).write_bytes(apply(root, m))
        if args.check:
            print(f"{len(chosen)} mutations apply once each")
            return 0
        for i, m in enumerate(chosen, 1):
            row = check_one(root, m, args.integration)
            rows.append(row)
            note = f" (missing: {', '.join(row['missing_tests'])})" if row["missing_tests"] else ""
            print(f"[{i}/{len(chosen)}] {m.name}: {row['result']} in {row['seconds']:.0f} s{note}",
                  flush=True)  # fmt: skip
            if row["result"] == "error":
                print(row.get("output", "")[-1500:], flush=True)
    caught = sum(r["result"] == "caught" for r in rows)
    print(table(rows))
    print(f"\n{caught} of {len(rows)} caught")
    if not args.only:
        write_results(header(argv, load_before), rows)
        print(f"wrote {RESULTS / 'mutation_check.md'} and .json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StaleMutation as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)

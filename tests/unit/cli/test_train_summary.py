"""The end-of-run table shows the numbers of the JSON result, a metric a line."""

from __future__ import annotations

from cmpnn_dist.cli.train import summary_table


def test_summary_table_rows_match_the_result():
    out = {
        "run_dir": "runs/x",
        "valid": {"mrr": 0.51234, "hits@10": 0.9, "num_queries": 448.0},
        "test": {
            "mrr": 0.6,
            "hits@10": 0.91,
            "accuracy": 0.8,
            "num_queries": 400.0,
            "protocol": "typed",
            "ties": "average",
        },
    }
    lines = summary_table(out).splitlines()
    assert lines[0] == "done: runs/x"
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:-1]}
    assert rows == {"mrr": ["0.5123", "0.6000"], "hits@10": ["0.9000", "0.9100"],
                    "accuracy": ["-", "0.8000"]}  # fmt: skip
    assert lines[-1] == (
        "  rankings: valid 448, test 400 (both directions; protocol typed, ties average)"
    )
    assert summary_table({"run_dir": "r", "valid": {}, "test": {}}) == "done: r"


def test_first_lines_describe_data_and_model(tmp_path, capsys):
    from cmpnn_dist.training.loop import fit
    from tests.helpers.training import rule_kg, small_cfg

    data = rule_kg(32)
    cfg = small_cfg(epochs=1)
    result = fit(cfg, data, run_dir=tmp_path)
    params = sum(p.numel() for p in result.model.parameters())
    first = capsys.readouterr().err.splitlines()[0]
    steps = len(data.train.queries) // cfg.train.batch_size
    assert first == (
        f"data: 32 entities, 3 relations, {len(data.train.queries)} training facts "
        f"(transductive) | model: cmpnn 2 x 8, {params:,} parameters | {steps} steps of 8 "
        "queries on cpu"
    )


def test_train_leaves_the_callers_config_as_given(tmp_path, monkeypatch):
    """``train()`` fills in the run name and an absolute storage root on its own copy: the
    caller's config still says what the caller set (issue 23)."""
    import copy

    from cmpnn_dist.cli.common import compose_config
    from cmpnn_dist.cli.train import train
    from tests.helpers.real_run import TINY

    monkeypatch.chdir(tmp_path)
    cfg = compose_config("default", ["storage_root=relative_store", *TINY])
    assert cfg.run_name is None
    before = copy.deepcopy(cfg)
    out = train(cfg)
    assert cfg == before  # nothing rewritten in place
    run_dir = tmp_path / "relative_store" / "runs"
    (made,) = run_dir.iterdir()  # the copy's default name: <data.name>-<time>
    assert made.name.startswith(f"{cfg.data.name}-")
    assert out["run_dir"] == str(made)

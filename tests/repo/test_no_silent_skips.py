"""Tests that need ../shared/data fail in CI when it is missing, and skip with a reason
elsewhere (never silently pass over the reference graphs)."""

from __future__ import annotations

import pytest

from tests.helpers.paths import require_shared_data


def test_missing_shared_data_fails_in_ci_and_skips_elsewhere(tmp_path, monkeypatch):
    missing = tmp_path / "no_such_data"
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_shared_data(missing)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no_such_data is absent"):
        require_shared_data(missing)
    assert require_shared_data(tmp_path) == tmp_path

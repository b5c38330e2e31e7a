"""`gpulease catalog-check FILE` says OK with what the file holds, or the first problem in
one line naming the file, the entry and the field; a process started with a broken catalog
says the same line instead of a traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpulease.cli.main import app
from gpulease.domain.catalog import DEFAULT_CATALOG


def broken(tmp_path: Path) -> Path:
    bad = tmp_path / "catalog.toml"
    bad.write_text(DEFAULT_CATALOG.read_text(encoding="utf-8").replace(
        'gpu_temp_max_c = "87"', 'gpu_temp_max_c = "870"', 1), encoding="utf-8")
    return bad


def test_a_good_catalog_is_ok_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    good = runner.invoke(app, ["catalog-check", str(DEFAULT_CATALOG)])
    assert good.exit_code == 0 and ": OK: " in good.output and "offers" in good.output
    bad = broken(tmp_path)
    refused = runner.invoke(app, ["catalog-check", str(bad)])
    assert refused.exit_code == 1
    text = " ".join(refused.output.split())
    assert f"{bad}: [[skus]] #3 (h100-80g-x8): field 'acceptance.gpu_temp_max_c'" in text
    assert "Traceback" not in refused.output


def test_a_process_started_with_a_broken_catalog_says_it_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    started = runner.invoke(app, ["migrate", "--data-dir", str(tmp_path / "data")],
                            env={"GPULEASE_CATALOG_FILE": str(broken(tmp_path))})
    assert started.exit_code == 1
    assert "[[skus]] #3 (h100-80g-x8)" in " ".join(started.output.split())

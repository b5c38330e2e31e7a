"""`gpulease lab` and `gpulease image build` refuse clearly without a lab or an image, and
change nothing (exit 1 with what to run; 2 for a bad option)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpulease.cli.main import app


def said(output: str) -> str:
    """The output with the terminal's line wrapping undone."""
    return " ".join(output.split())


def test_the_lab_commands_say_what_to_run_when_there_is_no_lab_or_no_image(
        tmp_path: Path) -> None:
    runner = CliRunner()
    folder = str(tmp_path / "lab")
    status = runner.invoke(app, ["lab", "status", "--dir", folder])
    assert status.exit_code == 0 and "gpulease lab up" in said(status.output)
    key = tmp_path / "key.pub"
    key.write_text("ssh-ed25519 AAAA test\n")
    deployed = runner.invoke(app, ["lab", "deploy", "gpulease-lab-01", "--dir", folder,
                                   "--ssh-key", str(key)])
    assert deployed.exit_code == 1 and "gpulease lab up" in said(deployed.output)
    erased = runner.invoke(app, ["lab", "erase", "gpulease-lab-01", "--dir", folder])
    assert erased.exit_code == 1 and "gpulease lab up" in said(erased.output)
    down = runner.invoke(app, ["lab", "down", "--dir", folder])
    assert down.exit_code == 0
    assert not (tmp_path / "lab").exists()  # nothing made


def test_a_lab_accelerator_other_than_kvm_or_tcg_is_refused(tmp_path: Path) -> None:
    made = CliRunner().invoke(app, ["lab", "up", "--accel", "hvf", "--dir",
                                    str(tmp_path / "lab")])
    assert made.exit_code == 2 and "kvm" in said(made.output)
    assert not (tmp_path / "lab").exists()

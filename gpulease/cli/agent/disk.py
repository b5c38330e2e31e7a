"""`gpulease agent encrypt-data|unlock-data`: the tenant's data disk encrypted with a key
only they hold, run on the rented server (agent/disk_keys.py). The key is a passphrase
typed at the prompt or a key file the tenant keeps; the platform never sees it."""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from gpulease.agent import disk_keys
from gpulease.cli.agent.commands import agent_app, err, out
from gpulease.cli.words import _

KeyFileOpt = Annotated[Path | None, typer.Option(
    "--key-file", help="read the key from this file (kept by you) instead of a prompt")]


def _key(key_file: Path | None, confirm: bool) -> bytes:
    if key_file is not None:
        return key_file.read_bytes()
    first = getpass.getpass("passphrase (only you will hold it): ")
    if confirm and getpass.getpass("again: ") != first:
        err.print(_("[red]error[/red]: the two passphrases differ; nothing was changed"))
        raise typer.Exit(2)
    return first.encode()


def _mount(mapped: str, mount: str, new: bool) -> None:
    if new:
        subprocess.run(["mkfs.ext4", "-q", "-L", "data", mapped], check=True)
    Path(mount).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", mapped, mount], check=True)


@agent_app.command("encrypt-data")
def encrypt_data(
    device: Annotated[str, typer.Argument(help="the data disk, e.g. /dev/nvme1n1")],
    key_file: KeyFileOpt = None,
    mount: Annotated[str, typer.Option(help="where it is mounted")] = "/data",
    yes: Annotated[bool, typer.Option("--yes", help="it holds nothing I need")] = False,
) -> None:
    """Encrypt the data disk with LUKS2 under your key (what it holds is lost), then
    unlock, format and mount it. At release its key slots are destroyed first."""
    if not yes:
        err.print(_("This erases what {device} holds: add --yes to go on.", device=device))
        raise typer.Exit(2)
    try:
        disk_keys.format_encrypted(device, _key(key_file, confirm=True))
        out.print(_("{device}: LUKS2, key slot 0 holds your key (the platform has no copy)",
                    device=device))
        mapped = disk_keys.unlock(device, _key(key_file, confirm=False))
    except disk_keys.DiskKeyError as exc:
        err.print(_("[red]error[/red]: {error}", error=exc))
        raise typer.Exit(1) from None
    _mount(mapped, mount, new=True)
    out.print(_("{mapped} mounted at {mount}; after a reboot: gpulease agent unlock-data "
                "{device}", mapped=mapped, mount=mount, device=device))


@agent_app.command("unlock-data")
def unlock_data(
    device: Annotated[str, typer.Argument(help="the encrypted data disk")],
    key_file: KeyFileOpt = None,
    mount: Annotated[str, typer.Option(help="where it is mounted")] = "/data",
) -> None:
    """Unlock the encrypted data disk with your key and mount it (after a reboot)."""
    if not disk_keys.is_luks(device):
        err.print(_("[red]error[/red]: {device} is not encrypted (no LUKS header)",
                    device=device))
        raise typer.Exit(1)
    try:
        mapped = disk_keys.unlock(device, _key(key_file, confirm=False))
    except disk_keys.DiskKeyError as exc:
        err.print(_("[red]error[/red]: {error}", error=exc))
        raise typer.Exit(1) from None
    _mount(mapped, mount, new=False)
    out.print(_("{mapped} mounted at {mount}", mapped=mapped, mount=mount))

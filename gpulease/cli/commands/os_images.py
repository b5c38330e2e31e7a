"""`gpulease image build`: a bootable Debian image from Debian's packages and the node
agent, with its size and SHA-256, in the image store that image deploys read (or to
register elsewhere with `gpulease image add`; docs/operations.md, "OS images")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpulease.cli.commands.catalog import image_app
from gpulease.cli.common import JsonOpt, err, out
from gpulease.cli.words import _
from gpulease.osimage.build import Recipe, build

app = typer.Typer()  # the command lives in `gpulease image`


@image_app.command("build")
def image_build(
    cache: Annotated[Path, typer.Option(
        "--cache", envvar="GPULEASE_IMAGE_STORE",
        help="the image store: where images are built and kept, by their inputs' hash")
    ] = Path("/var/tmp/gpulease-images"),
    suite: Annotated[str, typer.Option(help="Debian release")] = "bookworm",
    mirror: Annotated[str, typer.Option(help="Debian mirror")] = "http://deb.debian.org/debian",
    image_id: Annotated[str, typer.Option("--id", help="the image's catalog id")
                        ] = "debian12-lab",
    as_json: JsonOpt = False,
) -> None:
    """Build a bootable Debian image (debootstrap; cloud-init, OpenSSH, the serial
    console, the node agent); print its path, size and SHA-256."""
    try:
        built = build(cache, Recipe(suite=suite, mirror=mirror, image_id=image_id),
                      log=cache / f"{image_id}-build.log")
    except RuntimeError as exc:
        err.print(_("[red]error[/red]: the image was not built: {error}", error=exc))
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(json.dumps(built.__dict__, indent=2) + "\n")
        return
    out.print(_("{image}: {path}, {size:,} bytes, sha256 {sha}", image=built.image_id,
                path=built.path, size=built.size_bytes, sha=built.sha256)
              + (_(" (from the cache)") if built.from_cache else ""))
    out.print(_("image deploys of {image} (an offer with deploy = \"image\") write it from "
                "here (GPULEASE_IMAGE_STORE={store}); elsewhere, serve it and register it: "
                "gpulease image add --id {image} --image-url <URL> --checksum sha256:{sha} …",
                image=built.image_id, store=cache, sha=built.sha256))

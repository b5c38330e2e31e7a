"""The gpulease command line. Talks to a server through GPULEASE_URL / GPULEASE_TOKEN,
except `up`, `serve`, `worker`, `migrate` and `states`, which run the platform itself.
One module per group of commands; this one puts them together."""

from __future__ import annotations

import typer

from gpulease.cli import help_text
from gpulease.cli.agent import backup as agent_backup
from gpulease.cli.agent import disk as agent_disk
from gpulease.cli.agent.commands import agent_app
from gpulease.cli.commands import (
    accounts as accounts_cmds,
)
from gpulease.cli.commands import (
    audit as audit_cmds,
)
from gpulease.cli.commands import (
    backups as backup_cmds,
)
from gpulease.cli.commands import (
    catalog as catalog_cmds,
)
from gpulease.cli.commands import (
    fabrics as fabric_cmds,
)
from gpulease.cli.commands import (
    fleet as fleet_cmds,
)
from gpulease.cli.commands import (
    instances as instances_cmds,
)
from gpulease.cli.commands import (
    lab as lab_cmds,
)
from gpulease.cli.commands import (
    money as money_cmds,
)
from gpulease.cli.commands import (
    os_images as os_image_cmds,
)
from gpulease.cli.commands import (
    platform as platform_cmds,
)
from gpulease.cli.commands import (
    saved_images as saved_image_cmds,
)
from gpulease.cli.commands import (
    storage as storage_cmds,
)
from gpulease.cli.commands import (
    tickets as ticket_cmds,
)

app = typer.Typer(help="gpulease: rent out and rent GPU servers.", no_args_is_help=True)
for group in (platform_cmds, catalog_cmds, instances_cmds, fleet_cmds, fabric_cmds,
              accounts_cmds, money_cmds, audit_cmds, ticket_cmds, storage_cmds, backup_cmds,
              lab_cmds):
    app.add_typer(group.app)
app.add_typer(agent_app, name="agent")  # with agent_backup's and agent_disk's commands
assert agent_backup and agent_disk and saved_image_cmds and os_image_cmds  # join `agent`, `image`


def main() -> None:
    """The `gpulease` command: the app, its `--help` in the terminal's language."""
    help_text.command(app)()


if __name__ == "__main__":
    main()

"""`gpulease-agent` (or `python -m gpulease.cli.agent`): the node agent's commands alone,
the same as `gpulease agent …`, for an installed server that carries the agent and what it
needs rather than the whole platform (the image build installs it this way)."""

from __future__ import annotations

from gpulease.cli import help_text
from gpulease.cli.agent import backup, disk
from gpulease.cli.agent.commands import agent_app

assert backup and disk  # their commands join `agent_app`


def main() -> None:
    help_text.command(agent_app)()


if __name__ == "__main__":
    main()

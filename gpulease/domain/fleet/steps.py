"""A node's pipeline stage as a tenant reads it ("installing the OS, 4 of 7") rather than its
code (`wait_agent`): for the console's delivery page and histories and the CLI's
delivery progress, each in its reader's language (the gettext given)."""

from __future__ import annotations

from collections.abc import Callable

from gpulease.domain.states import (
    CLEAN_ORDER,
    DEPLOY_ORDER,
    IMAGE_DEPLOY_ORDER,
    RETURN_ORDER,
    NodeStage,
)

St = NodeStage


def _(message: str) -> str:
    """Marks a message for the catalog (extracted by `make messages`); translated where it
    is shown."""
    return message


# Each pipeline step as the tenant reads it; the count is its place in its pipeline.
STEP_WORDS: dict[str, str] = {
    St.POWER_OFF: _("powering the server off"),
    St.ATTACH_MEDIA: _("attaching the OS image"),
    St.POWER_ON: _("starting the installer"),
    St.WRITE_IMAGE: _("writing the OS image"),
    St.BOOT_DISK: _("booting the installed system"),
    St.WAIT_AGENT: _("installing the OS"),
    St.VERIFY: _("running the acceptance tests"),
    St.CONFIGURE: _("putting your SSH keys and password in place"),
    St.DETACH_MEDIA: _("handing over"),
    St.CLEAN_SHUTDOWN: _("powering the server off"),
    St.CLEAN_ATTACH_MEDIA: _("attaching the erase system"),
    St.CLEAN_POWER_ON: _("starting the erase system"),
    St.CLEAN_WAIT_AGENT: _("waiting for the erase system"),
    St.ERASE: _("erasing the disks"),
    St.BURN_IN: _("burn-in tests after a repair"),
    St.CLEAN_POWER_OFF: _("powering off; back to the pool"),
    St.RETURN_POWER_ON: _("starting your system after the repair"),
    St.RETURN_WAIT_AGENT: _("waiting for your system"),
    St.RETURN_VERIFY: _("acceptance tests after the repair"),
}
# (an image deploy's own steps count in its pipeline; those it shares, in the installer's)
_PLACE = {stage.value: (i + 1, len(order))
          for order in (IMAGE_DEPLOY_ORDER, DEPLOY_ORDER, CLEAN_ORDER, RETURN_ORDER)
          for i, stage in enumerate(order)}


def step_words(stage: str | None, gettext: Callable[[str], str] = _) -> str:
    """A node's pipeline stage as the tenant reads it: "installing the OS, 4 of 7"; other
    stages (an instance's `deploying`) as their name with spaces."""
    if not stage:
        return ""
    for suffix, form in ((" result", _("%(step)s — result")),
                         (" (retry)", _("%(step)s — will retry"))):
        if stage.endswith(suffix):  # a step's note or error in a history (assemble_view)
            return gettext(form) % {"step": step_words(stage.removesuffix(suffix), gettext)}
    words = STEP_WORDS.get(stage)
    if words is None:
        return gettext(stage.replace("_", " "))
    at, of = _PLACE[stage]
    return gettext("%(step)s, %(at)d of %(of)d") % {"step": gettext(words), "at": at,
                                                      "of": of}

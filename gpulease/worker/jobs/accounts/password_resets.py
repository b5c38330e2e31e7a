"""Password reset links mailed, each once (services/accounts/password_resets.py)."""

from __future__ import annotations

from gpulease.platform import Platform
from gpulease.services.accounts.password_resets import deliver_reset_mails
from gpulease.worker.jobs.job import Job


def run(p: Platform, _owner: str) -> int:
    return deliver_reset_mails(p)


JOB = Job("password-resets", run, "password reset links by e-mail, each once")

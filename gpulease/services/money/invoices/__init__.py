"""Invoices: the monthly run that drafts and finalizes them (and corrects them by credit
notes), reading them, and their CSV and PDF. Their tables are the money family's."""

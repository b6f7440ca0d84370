"""This assignment's own messages (assertion texts, test titles, the catalogue's explanations):
written in Chinese, translated through the ``assignment`` gettext domain, whose catalogues live
in ``locale/`` beside this file (so they move with the assignment's folder)."""

from pathlib import Path

from attnkit.i18n import ASSIGNMENT_DOMAIN, N_, domain_functions

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
_, ngettext = domain_functions(LOCALE_DIR, ASSIGNMENT_DOMAIN)

__all__ = ["LOCALE_DIR", "N_", "_", "ngettext"]

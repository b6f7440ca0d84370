"""Messages in the reader's language: Chinese (the default, the msgids themselves) or English.

Standard gettext: every message a TA or student reads is written in Chinese in the code, wrapped
in ``_()`` (or ``ngettext``), with named placeholders filled by ``str.format`` after translation so
a translator sees whole sentences. The English catalogues are plain ``.po`` files compiled in
memory with Babel (no build step, nothing generated to keep in sync):

- ``attnkit/locale/en/LC_MESSAGES/attnkit.po``: the engine (console, pages, intake problems, …);
- ``<assignment folder>/locale/en/LC_MESSAGES/assignment.po``: the hidden suite's own texts
  (assertion messages, test titles, the catalogue of mistakes), which belong to the assignment.

The language is chosen once per process (``set_language``: ``--lang``, else ``ATTNKIT_LANG``,
else Chinese) and is inherited by the forked workers; the zygote is told it explicitly.
"""

from __future__ import annotations

import gettext
import io
import os
import threading
from functools import cache
from pathlib import Path
from typing import Any
from collections.abc import Callable

LANGUAGES = ("zh", "en")
DEFAULT_LANGUAGE = "zh"
ENV_VARIABLE = "ATTNKIT_LANG"
DOMAIN = "attnkit"
# The gettext domain of a hidden suite's own texts (its .po lives in <suite folder>/locale/).
ASSIGNMENT_DOMAIN = "assignment"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
# What a page's <html lang> says for each language.
HTML_LANG = {"zh": "zh-CN", "en": "en"}

_lock = threading.Lock()


def normalise(language: str | None) -> str | None:
    """``en``, ``en_US.UTF-8``, ``zh-CN`` … -> one of LANGUAGES (None when unknown or empty)."""
    if not language:
        return None
    base = language.strip().lower().replace("-", "_").split(".")[0].split("_")[0]
    return base if base in LANGUAGES else None


def default_language() -> str:
    """``ATTNKIT_LANG`` when it names a known language, else Chinese. The system locale is not
    consulted: Chinese stays the default unless English is asked for explicitly."""
    return normalise(os.environ.get(ENV_VARIABLE)) or DEFAULT_LANGUAGE


def set_language(language: str | None, export: bool = True) -> str:
    """Make ``language`` (or the default) current for this process and its forks; returns it.
    With ``export``, children that are started rather than forked (an nbgrader hook running
    ``attnkit``) inherit it through the environment."""
    global _current
    chosen = normalise(language) or default_language()
    _current = chosen
    if export:
        os.environ[ENV_VARIABLE] = chosen
    return chosen


# A process that never calls set_language (nbgrader's hooks, a Gradescope run) follows ATTNKIT_LANG.
_current = default_language()


def language() -> str:
    return _current


def html_lang() -> str:
    return HTML_LANG[_current]


# Per process, never invalidated: the .po files ship with the engine and with each suite, which a
# run does not change (an edited .po changes ``engine.grader_digest``, so the next run regrades).
@cache
def translations(locale_dir: str, domain: str, language: str) -> gettext.NullTranslations:
    """The catalogue of ``domain`` in ``language``, compiled from its .po in memory (cached).
    Chinese is the msgids themselves: no catalogue."""
    if language == DEFAULT_LANGUAGE:
        return gettext.NullTranslations()
    path = Path(locale_dir) / language / "LC_MESSAGES" / f"{domain}.po"
    if not path.is_file():
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with _lock, open(path, "rb") as handle:
        catalog = read_po(handle, locale=language, domain=domain)
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


def catalogue(locale_dir: Path | str, domain: str, language: str | None = None) -> gettext.NullTranslations:
    return translations(str(locale_dir), domain, language or _current)


def _(message: str) -> str:
    """The engine's message in the current language."""
    return catalogue(LOCALE_DIR, DOMAIN).gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    return catalogue(LOCALE_DIR, DOMAIN).ngettext(singular, plural, count)


def N_(message: str) -> str:
    """Marks a message for extraction where it is defined (a module constant); it is translated
    with ``_()`` where it is shown, in the language of that moment."""
    return message


def domain_functions(locale_dir: Path | str, domain: str) -> tuple[Callable[[str], str], Callable[[str, str, int], str]]:
    """``_`` and ``ngettext`` for another domain (an assignment's hidden suite), looked up in the
    current language at each call."""
    folder = str(locale_dir)

    def translate(message: str) -> str:
        return translations(folder, domain, _current).gettext(message)

    def plural(singular: str, plural_form: str, count: int) -> str:
        return translations(folder, domain, _current).ngettext(singular, plural_form, count)

    return translate, plural


def join(items: Any) -> str:
    """A list in running text: ``a、b、c`` in Chinese, ``a, b, c`` in English."""
    # Translators: the separator between the items of a list in running text.
    return _("、").join(str(item) for item in items)


def extract_with_titles(fileobj: Any, keywords: Any, comment_tags: Any, options: Any) -> Any:
    """Babel extraction method for the hidden suite: the usual ``_()`` calls, plus the first line
    of each test function's docstring (the title the feedback page shows; see markers.title_of)."""
    import ast

    from babel.messages.extract import extract_python

    data = fileobj.read()
    fileobj.seek(0)
    yield from extract_python(fileobj, keywords, comment_tags, options)
    tree = ast.parse(data.decode(options.get("encoding", "utf-8")) if isinstance(data, bytes) else data)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            doc = ast.get_docstring(node, clean=False) or ""
            first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
            if first:
                yield node.body[0].lineno, None, first, []


def extract_manifest(fileobj: Any, keywords: Any, comment_tags: Any, options: Any) -> Any:
    """Babel extraction method for an assignment's manifest.toml: its page title and part titles
    (``attnkit.assignment.folder.Assignment._`` translates them where they are shown)."""
    import tomllib

    manifest = tomllib.loads(fileobj.read().decode("utf-8"))
    if manifest.get("title"):
        yield 1, None, str(manifest["title"]), []
    for title in manifest.get("parts", {}).values():
        yield 1, None, str(title), []


def sentences(items: Any) -> str:
    """Whole sentences run together: no space after a Chinese full stop, one after an English one."""
    return ("" if _current == "zh" else " ").join(str(item) for item in items if str(item))

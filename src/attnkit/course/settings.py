"""The kit's settings, each declared once: a traitlets trait with its type, default and help, in one
of the configurable classes below, as nbgrader and JupyterHub declare theirs. A course sets them in
its ``nbgrader_config.py`` (``c.AttnkitLimits.cell_timeout = 20``), in the language nbgrader's
own settings are written in; a trait tagged ``env`` may come from that environment variable; one
tagged ``flag`` is the command line's option of that name (``add_flags`` makes the options from
these declarations, so a default is written here only).

One precedence, for every setting and every entry point (``KitSettings.load``):

    the command line  >  the environment  >  the course's nbgrader_config.py  >  the default

A process the kit starts (a worker is forked and needs nothing; the recorder, the hub side, the
nbgrader autograde hook's ``attnkit grade``) receives the whole resolved copy once, serialized in
``$ATTNKIT_SETTINGS`` (``KitSettings.environment``), and takes it as it is: a child never reads the
course's file again and cannot disagree with its parent. ``attnkit config`` prints every setting,
its value and where that value came from.

Knobs read below the course layer (the sandbox's test and operations variables, the language the
base layer sets up) keep their readers there; they are declared here too (``ENVIRONMENT_ONLY``),
so that ``attnkit config`` lists them and a test holds that no ``ATTNKIT_`` name is read anywhere
without a declaration here."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Integer, List, TraitType, Unicode
from traitlets.config import Config, Configurable

from attnkit.boundary.policy import DEFAULT_MEMORY_MB, Limits
from attnkit.constants import GraderError, broken_python
from attnkit.i18n import LANGUAGES

SETTINGS_VARIABLE = "ATTNKIT_SETTINGS"  # a parent's resolved settings, for the processes it starts


class AttnkitLimits(Configurable):
    """What one submission may take: the same for ``attnkit grade``, ``attnkit serve`` and nbgrader's autograde."""

    cell_timeout = Float(10.0, help="seconds per notebook cell").tag(config=True, flag="--cell-timeout")
    call_timeout = Float(10.0, help="seconds per call of a student function").tag(config=True, flag="--call-timeout")
    memory_mb = Integer(DEFAULT_MEMORY_MB, help="memory per sandbox beyond the libraries (MB)").tag(config=True, flag="--memory-mb")

    def limits(self, trusted: bool = False) -> Limits:
        """The engine's ``Limits`` (``boundary.policy``) these settings give."""
        return Limits(cell_seconds=self.cell_timeout, call_seconds=self.call_timeout, memory_mb=self.memory_mb, trusted=trusted)


class AttnkitServe(Configurable):
    """``attnkit serve``: the on-submit service (docs/service.md, docs/hub.md)."""

    policies = Dict(
        help='per assignment: attempts, window_hours, visibility ("full", "scores", "after-due"), counts ("latest", "best"),'
        ' hints ("full", "ladder") (service/policies.py)'
    ).tag(config=True)
    queue_url = Unicode("", help="a PostgreSQL URL for a queue shared by replicas (empty: SQLite in the course)").tag(
        config=True, flag="--queue-url", env="ATTNKIT_QUEUE_URL"
    )
    lease_seconds = Float(30.0, help="a shared queue's lease: a dead replica's work is taken again after it").tag(config=True, flag="--lease-seconds")
    metrics_host = Unicode("127.0.0.1", help="the address of /metrics and /health (0.0.0.0 in a pod, for its probes)").tag(
        config=True, flag="--metrics-host"
    )
    gradebook_timeout = Float(
        5.0, help="seconds the recorder waits for another process's lock on the gradebook (SQLite's timeout, PostgreSQL's lock_timeout), then retries"
    ).tag(config=True)
    hub_students = Dict(help="JupyterHub user name -> student id, where they differ").tag(config=True)
    hub_ta_groups = List(Unicode(), help="JupyterHub groups whose members see the class's page").tag(config=True)


class AttnkitCourse(Configurable):
    """The course folder's own care (``attnkit course secure``, docs/service.md)."""

    ta_group = Unicode("", help="the unix group of the TAs, who may read the hidden parts too (empty: none)").tag(config=True, flag="--ta-group")
    single_user = Bool(False, help="a machine with one user: the hidden parts need not be closed to others").tag(config=True)


class AttnkitOutput(Configurable):
    """What the kit prints and writes for people."""

    lang = Enum(LANGUAGES, "zh", help="the language of the console, pages and reports").tag(config=True, flag="--lang", env="ATTNKIT_LANG")
    progress_seconds = Float(30.0, help="seconds between two progress lines in a batch log").tag(config=True, env="ATTNKIT_PROGRESS_SECONDS")


class AttnkitLti(Configurable):
    """The course's LMS by LTI 1.3: its platform's registration, and how an LMS user is a student (docs/lms.md; lms/settings.py)."""

    issuer = Unicode("", help="the platform's issuer (empty: no LMS is connected)").tag(config=True)
    client_id = Unicode("", help="the tool's client id on the platform").tag(config=True)
    deployment_id = Unicode("", help="the tool's deployment id on the platform").tag(config=True)
    token_url = Unicode("", help="the platform's OAuth 2 token endpoint").tag(config=True)
    lineitems_url = Unicode("", help="Assignment and Grade Services: the course's line items").tag(config=True)
    memberships_url = Unicode("", help="Names and Role Provisioning Services: the course's memberships").tag(config=True)
    auth_login_url = Unicode("", help="the platform's OIDC authorization endpoint (the hub's login)").tag(config=True)
    platform_jwks_url = Unicode("", help="the platform's key set (the hub's login checks launches with it)").tag(config=True)
    student_id = Enum(["sub", "email", "email_local", "sourcedid"], "sub", help="which LMS user is which student: sub, email, email_local or sourcedid").tag(
        config=True
    )
    private_key = Unicode("", help="the tool's private key (empty: .attnkit-serve/lti-tool-key.pem)").tag(config=True)
    tag = Unicode("attnkit", help="the tag of the kit's line items (with resourceId = the assignment)").tag(config=True)
    timeout = Float(10.0, help="seconds per request to the LMS").tag(config=True)
    retries = Integer(4, help="retries of a request after a 429, a 5xx or no answer").tag(config=True)
    backoff = Float(1.0, help="seconds before the first retry, doubled each time").tag(config=True)
    backoff_max = Float(60.0, help="the longest wait between two tries (seconds)").tag(config=True)


SECTIONS: tuple[type[Configurable], ...] = (AttnkitLimits, AttnkitServe, AttnkitCourse, AttnkitOutput, AttnkitLti)

# Read where they act, below this layer or before any configuration exists; declared here so that
# `attnkit config` shows them and no ATTNKIT_ name is read undeclared (tests/cli/test_settings.py).
ENVIRONMENT_ONLY: dict[str, str] = {
    "ATTNKIT_LANDLOCK_ABI_MAX": "the highest Landlock ABI the sandbox uses (a test and operations knob; sandbox/lockdown/landlock.py)",
    "ATTNKIT_HUGE_PAGES": "0: the seed does not collapse its memory into huge pages (sandbox/seed_server.py)",
    "ATTNKIT_SERVICE_URL": "`attnkit submit`'s service URL in a student's server (cli.py)",
    "ATTNKIT_HUB_QUEUE": "the hub side's queue, set by `attnkit serve --hub` for its child (service/queue)",
    "ATTNKIT_CPU_ACCOUNT": "a file each process appends its CPU use to as it ends, for make bench's table by process kind (cpu_account.py)",
    "ATTNKIT_VENV": "the Gradescope bundle's existing environment (course/gradescope.py)",
    "ATTNKIT_VISIBILITY": "the Gradescope bundle's default result visibility (course/gradescope.py)",
    SETTINGS_VARIABLE: "a parent process's resolved settings, for the processes it starts (this module)",
}


def course_config(root: Path) -> Any:
    """The course's nbgrader configuration (late-submission policy, ...), loaded as nbgrader does:
    its apps run in the course's folder and put that folder on ``sys.path`` (``NbGrader.add_to_path``
    ... ``os.getcwd()``), so a class the configuration names by a module kept beside it (a course's own
    ``LateSubmissionPlugin``, say) imports; the kit runs from ``/`` and puts the course's folder there."""
    from traitlets.config.loader import Config, PyFileConfigLoader

    path = root / "nbgrader_config.py"
    if not path.is_file():
        return Config()
    if str(root) not in sys.path:
        sys.path.append(str(root))  # after the kit's own: a course module never shadows the grader's
    try:
        return PyFileConfigLoader(path.name, path=str(root)).load_config()
    except Exception as error:  # the course's own Python, broken: the file, the line and the error, for a person to fix
        raise GraderError(broken_python(path, error)) from None


def traits_of(section: type[Configurable]) -> dict[str, TraitType[Any, Any]]:
    return dict(sorted(section.class_traits(config=True).items()))


@dataclass
class KitSettings:
    """Every setting's value and where it came from, resolved once (``load``)."""

    config: Config
    sources: dict[str, str] = field(default_factory=dict)  # "Section.name" -> "--flag", "$VAR", the file, "parent process"

    @classmethod
    def load(cls, course: Path | None = None, command_line: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> KitSettings:
        """The settings for a process: a parent's copy where it gave one (``$ATTNKIT_SETTINGS``),
        else the course's ``nbgrader_config.py`` (``course``: its folder, or None), then the
        environment, then ``command_line`` ("Section.name" -> value; None: not given)."""
        environ = os.environ if environ is None else environ
        inherited = environ.get(SETTINGS_VARIABLE)
        settings = cls.parse(inherited) if inherited else cls(Config())
        if not inherited and course is not None:
            settings.take_course(course)
        if not inherited:
            for section in SECTIONS:
                for name, trait in traits_of(section).items():
                    variable = trait.metadata.get("env")
                    if variable and environ.get(variable):
                        settings.set(section.__name__, name, trait.from_string(environ[variable]), f"${variable}")
        for key, value in (command_line or {}).items():
            if value is not None:
                section_name, name = key.split(".")
                flag = traits_of(section_of(section_name))[name].metadata.get("flag", key)
                settings.set(section_name, name, value, str(flag))
        return settings

    def take_course(self, course: Path) -> None:
        config = course_config(course)
        for section in SECTIONS:
            found = config.get(section.__name__, {})
            for name in traits_of(section):
                if hasattr(found, "get") and name in found:
                    self.set(section.__name__, name, found[name], str(course / "nbgrader_config.py"))

    def set(self, section: str, name: str, value: Any, source: str) -> None:
        self.config[section][name] = value
        self.sources[f"{section}.{name}"] = source

    def section(self, section: type[Configurable]) -> Any:
        """The configured instance of one of SECTIONS (its traits validated)."""
        return section(config=self.config)

    @property
    def limits(self) -> AttnkitLimits:
        return self.section(AttnkitLimits)

    @property
    def serve(self) -> AttnkitServe:
        return self.section(AttnkitServe)

    @property
    def course(self) -> AttnkitCourse:
        return self.section(AttnkitCourse)

    @property
    def lti(self) -> AttnkitLti:
        return self.section(AttnkitLti)

    @property
    def output(self) -> AttnkitOutput:
        return self.section(AttnkitOutput)

    def serialized(self) -> str:
        """Every set value and its source, as ``$ATTNKIT_SETTINGS`` carries them to a child."""
        values = {section: dict(entries) for section, entries in self.config.items() if section in {s.__name__ for s in SECTIONS}}
        return json.dumps({"values": values, "sources": self.sources}, ensure_ascii=False, sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> KitSettings:
        found = json.loads(text)
        settings = cls(Config())
        for section, entries in found.get("values", {}).items():
            for name, value in entries.items():
                source = found.get("sources", {}).get(f"{section}.{name}", "")
                settings.set(section, name, value, f"parent process ({source})" if source and not source.startswith("parent") else source)
        return settings

    def environment(self) -> dict[str, str]:
        """The variable a started child needs to receive these settings as they are."""
        return {SETTINGS_VARIABLE: self.serialized()}

    def rows(self) -> Iterator[tuple[str, Any, str, str]]:
        """(``Section.name``, value, where it came from, help) for every declared setting."""
        for section in SECTIONS:
            instance = self.section(section)
            for name, trait in traits_of(section).items():
                key = f"{section.__name__}.{name}"
                yield key, getattr(instance, name), self.sources.get(key, "default"), str(trait.help)


def section_of(name: str) -> type[Configurable]:
    for section in SECTIONS:
        if section.__name__ == name:
            return section
    raise KeyError(name)


def add_flags(parser: argparse.ArgumentParser, *sections: type[Configurable]) -> None:
    """The command-line options of ``sections``' traits tagged ``flag``: the type, the help and
    the default shown are the declaration's; a value not given is None (``command_line_values``)."""
    for section in sections:
        for name, trait in traits_of(section).items():
            flag = trait.metadata.get("flag")
            if not flag:
                continue
            kind: Any = {Float: float, Integer: int}.get(type(trait), str)
            choices = list(trait.values) if isinstance(trait, Enum) and trait.values is not None else None
            default = trait.default_value
            help_text = f"{trait.help} (default: {default!s}; c.{section.__name__}.{name} in nbgrader_config.py"
            help_text += f", ${trait.metadata['env']})" if trait.metadata.get("env") else ")"
            parser.add_argument(flag, type=kind, choices=choices, default=None, dest=f"{section.__name__}.{name}", help=help_text.replace("%", "%%"))


def command_line_values(args: argparse.Namespace) -> dict[str, Any]:
    """The declared settings given on this command line ("Section.name" -> value, None where not given)."""
    return {key: value for key, value in vars(args).items() if "." in key and key.split(".")[0] in {s.__name__ for s in SECTIONS}}


def shown_value(value: Any) -> str:
    """A value as ``attnkit config`` prints it: a database URL's password never (it is a secret)."""
    if isinstance(value, str) and "://" in value:
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.password:
            return repr(value.replace(f":{parts.password}@", ":***@", 1))
    return repr(value)


def print_settings(settings: KitSettings) -> None:
    """``attnkit config``: every setting, its value and where it came from; then the variables read where they act."""
    rows = list(settings.rows())
    width = max(len(key) for key, *_rest in rows)
    for key, value, source, help_text in rows:
        print(f"{key:<{width}}  {shown_value(value)}  [{source}]\n{'':<{width}}  {help_text}")
    print()
    for variable, help_text in ENVIRONMENT_ONLY.items():
        shown = "(set)" if variable == SETTINGS_VARIABLE and os.environ.get(variable) else shown_value(os.environ.get(variable, ""))
        print(f"${variable:<{width - 1}}  {shown}  [environment]\n{'':<{width}}  {help_text}")

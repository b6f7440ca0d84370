"""The LMSs' names in a download: whose file it is, by the part of its name the LMS made.

- Canvas: one flat folder of renamed files,
  ``lastnamefirstname[_LATE]_<user_id>_<submission_id>_<original name>``.
- Moodle: one folder per student, ``Full Name_<participant_id>_assignsubmission_file_/attention.ipynb``
  (older Moodle versions flatten this to ``Full Name_<id>_assignsubmission_file_attention.ipynb``).
- Blackboard: one flat folder, ``<Assignment>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original name>``
  plus one ``<Assignment>_<username>_attempt_<time>.txt`` per attempt naming the student.

Identity: the student id comes only from the part of a name the LMS made (Canvas's and
Blackboard's prefix, Moodle's OUTERMOST folder; :func:`claim`); the rest (the student's own file
name, folders inside a Moodle submission, zip entries) is data and never names anyone, except to
be refused when it spells another student (:func:`other_ids`). The format is the TA's ``--lms``,
or one detected for the whole download from entries only one format explains (:func:`detect`: an
entry a student crafted to look like another format explains two and proves nothing); never file
by file. :func:`notebook_of` matches the student's file name to one of the assignment's notebooks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from attnkit import i18n
from attnkit.i18n import _

FORMATS = ("canvas", "moodle", "blackboard")

# The FIRST fields are Canvas's: a name without "_" (lastnamefirstname), the late flag, the user id
# and the submission id. Whatever follows is the student's file name, whatever it looks like.
CANVAS = re.compile(r"^(?P<name>[^_/]+?)(?P<late>_late)?_(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$", re.IGNORECASE)
MOODLE_FOLDER = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_?$", re.IGNORECASE)
MOODLE_FLAT = re.compile(r"^(?P<name>[^_/]+)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.+)$", re.IGNORECASE)
# The assignment's title may hold "_"; the first "_<username>_attempt_<time>" is Blackboard's.
BLACKBOARD = re.compile(r"^(?P<assignment>.+?)_(?P<id>[^_/]+)_attempt_(?P<when>\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2})(?:_(?P<file>.+)|\.txt)$")
BLACKBOARD_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<id>[^()]+)\)\s*$", re.MULTILINE)
# Canvas renames a resubmission "attention-1.ipynb"; browsers save a second copy "attention (1).ipynb".
RENAMED = re.compile(r"^(?P<base>.+?)(?:-\d+| \(\d+\))$")


@dataclass
class Claim:
    """What the LMS-made part of an entry's path says: whose it is and what the student called it."""

    student_id: str
    name: str
    original: str  # the student's own file name (data)
    order: tuple = ()
    late: bool | None = None
    when: str = ""  # Blackboard's attempt time, in the LMS's zone
    nested: tuple[str, ...] = ()  # folders the student made inside a Moodle submission
    info: bool = False  # Blackboard's attempt .txt, not a submitted file
    file_id: str = ""  # Canvas's id of the file (its "submission" field)


def claim(path: PurePosixPath, lms: str) -> Claim | None:
    """The LMS-made claim of ``path`` under format ``lms``, or None if that LMS did not make it
    (or its id could not be a student's folder: ``submitted/<id>/`` must stay inside submitted/)."""
    claimed = _claim(path, lms)
    return claimed if claimed is not None and _folder_name(claimed.student_id) else None


def _folder_name(student_id: str) -> bool:
    """An id that is one folder name of its own: not "." or ".." (Blackboard's usernames are
    ``[^_/]+``), nothing unprintable (a NUL would stop the whole collect)."""
    return student_id not in (".", "..") and student_id.isprintable() and student_id.strip() == student_id != ""


def _claim(path: PurePosixPath, lms: str) -> Claim | None:
    if lms == "canvas":
        match = CANVAS.match(path.name) if len(path.parts) == 1 else None
        if match:
            return Claim(match["id"], match["name"], match["file"], (int(match["submission"]),), bool(match["late"]), file_id=match["submission"])
    elif lms == "moodle":
        for depth, part in enumerate(path.parts[:-1]):  # the OUTERMOST Moodle folder; above it, the TA's
            folder = MOODLE_FOLDER.match(part)
            if folder:
                return Claim(folder["id"], folder["name"], path.name, nested=tuple(path.parts[depth + 1 : -1]))
        flat = MOODLE_FLAT.match(path.name) if len(path.parts) == 1 else None
        if flat:
            return Claim(flat["id"], flat["name"], flat["file"])
    elif lms == "blackboard":
        match = BLACKBOARD.match(path.name) if len(path.parts) == 1 else None
        if match:
            return Claim(match["id"], "", match["file"] or "", (match["when"],), when=match["when"], info=match["file"] is None)
    return None


def detect(entries: list[PurePosixPath]) -> str:
    """The one format that made this download, or ValueError saying why there is none.

    Only an entry exactly one format explains is evidence: a student's file name crafted to look
    like another LMS's (Canvas keeps it after its own prefix) explains two formats and counts for none."""
    evidence: dict[str, PurePosixPath] = {}
    for path in entries:
        formats = [lms for lms in FORMATS if claim(path, lms)]
        if len(formats) == 1:
            evidence.setdefault(formats[0], path)
    if len(evidence) == 1:
        return next(iter(evidence))
    if not evidence:
        raise ValueError(_("无法判断下载来自哪个学习平台（没有文件符合 Canvas、Moodle 或 Blackboard 的命名）；请用 --lms 指明"))
    examples = i18n.join(f"{lms}（{path}）" for lms, path in sorted(evidence.items()))
    raise ValueError(_("下载中混有多个学习平台的命名：{examples}；请用 --lms 指明，一次只收一个平台的下载").format(examples=examples))


def other_ids(claimed: Claim) -> list[str]:
    """Student ids that the student-made parts (file name, nested folders) spell in any LMS's format."""
    found = []
    for text in (claimed.original, *claimed.nested):
        single = PurePosixPath(text or "_")
        for lms in FORMATS:
            inner = claim(single, lms) or (claim(single / "x", lms) if lms == "moodle" else None)
            if inner and inner.student_id != claimed.student_id:
                found.append(inner.student_id)
    return sorted(set(found))


def notebook_of(original: str, notebooks: dict[str, str]) -> tuple[str, list[str]] | str:
    """(the assignment's notebook, notes) the student's file is, or the reason it is none."""
    stem, suffix = os.path.splitext(original)
    if suffix.lower() != ".ipynb":
        return _("不是笔记本（{suffix}）").format(suffix=suffix) if suffix else _("不是笔记本（无扩展名）")
    renamed = RENAMED.match(stem)
    name = notebooks.get(stem.lower()) or (notebooks.get(renamed["base"].lower()) if renamed else None)
    if name is None:
        return _("笔记本名 {name} 不是本作业的（应为 {expected}）").format(name=original, expected=i18n.join(sorted(v + ".ipynb" for v in notebooks.values())))
    notes = []
    if original != name + ".ipynb" and not re.fullmatch(re.escape(name) + r"-\d+\.ipynb", original):
        notes.append(_("提交的文件名是 {original}，已按作业的笔记本名 {name}.ipynb 保存和评分").format(original=original, name=name))
    return name, notes

"""A shard set that proves itself: what each ``attnkit grade --shard i/n`` records, and what
``attnkit merge`` checks before it takes anything (docs/shards.md).

    OUT/shard.json       the shard's manifest, written (atomically) before any grading:
                         its index and count, a digest of the whole class listing, the grader
                         (attnkit's version and each assignment's suite digest), the language,
                         where the class was read from, and the students it owns with the
                         fingerprint each was graded at
    OUT/shard.finished   written last, once the shard's outputs are all written: the sha256 of
                         the very shard.json it finishes (a marker left from an older manifest
                         does not count)

Membership is by a hash of the student id, not by position in the sorted class: a student
added late lands in one shard and moves nobody else, so every other shard's results stay its
own. A student's assignments stay together in one shard.

``plan_merge`` refuses, naming the shard and the command that fixes it, a set that is
incomplete, unfinished (interrupted, or still running: its lock held), cut from another class
listing, graded by another grader or in another language, or whose results are not the ones its
manifest names; it then takes from each shard only the students that shard owns.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import attnkit
from attnkit import i18n
from attnkit.assignment.folder import Assignment
from attnkit.constants import STUDENTS_FOLDER, GraderError
from attnkit.files import atomic_write
from attnkit.i18n import _
from attnkit.report.store import LOCK_FILE, SHARD_FILE, Job, results_path

FINISHED_FILE = "shard.finished"
MERGED_FILE = "merged.json"  # in a merge's OUT: the submissions it wrote there (``forget_unmerged``)
FORMAT = 2  # shard.json's format; 1 (index and count only) was written before shard sets proved themselves


def owner(student_id: str, count: int) -> int:
    """The shard (1-based) that owns ``student_id`` in a set of ``count``: a hash of the id alone,
    so it never depends on who else is in the class."""
    digest = hashlib.sha256(student_id.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


J = TypeVar("J", bound=Job)


def owned_jobs(jobs: Sequence[J], shard: tuple[int, int] | None) -> list[J]:
    """The jobs shard ``i/n`` owns (all of them without a shard)."""
    if shard is None:
        return list(jobs)
    index, count = shard
    return [job for job in jobs if owner(job.student_id, count) == index]


def key_of(student_id: str, assignment: str) -> str:
    return f"{student_id}/{assignment}"


def class_digest(jobs: Iterable[Job]) -> str:
    """The whole class listing (who, which assignment), whatever slice of it a shard grades."""
    digest = hashlib.sha256()
    for student_id, assignment in sorted((job.student_id, job.assignment) for job in jobs):
        digest.update(student_id.encode("utf-8", "surrogateescape") + b"\0" + assignment.encode() + b"\n")
    return digest.hexdigest()


def grader_identity(suites: dict[str, Assignment], assignments: Iterable[str]) -> dict[str, Any]:
    """attnkit's version and each graded assignment's suite digest, without the language (which
    the manifest records apart, so that the merge can name which of the two differs)."""
    from attnkit.intake.jobs import grader_digest

    graded = sorted({name for name in assignments if name in suites})
    return {"version": attnkit.__version__, "suites": {name: grader_digest(suites[name], i18n.DEFAULT_LANGUAGE) for name in graded}}


def begin_shard(
    out: Path,
    shard: tuple[int, int] | None,
    class_jobs: Sequence[Job],
    owned: Sequence[Job],
    suites: dict[str, Assignment],
    submitted: Path,
    only: str | None,
    skipped: list[dict[str, str]],
) -> None:
    """Before any grading: the finished marker goes first, then the manifest is written, so
    that a shard stopped anywhere after this reads as unfinished. A whole run in a folder that
    once held a shard leaves neither."""
    (out / FINISHED_FILE).unlink(missing_ok=True)
    if shard is None:
        (out / SHARD_FILE).unlink(missing_ok=True)
        return
    manifest = {
        "format": FORMAT,
        "index": shard[0],
        "count": shard[1],
        "class": {"digest": class_digest(class_jobs), "size": len(class_jobs)},
        "grader": grader_identity(suites, [job.assignment for job in class_jobs]),
        "language": i18n.language(),
        "submitted": str(submitted.absolute()),
        "assignment": only,
        "students": {key_of(job.student_id, job.assignment): job.fingerprint for job in owned},
        "skipped": skipped,
    }
    atomic_write(out / SHARD_FILE, json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True))


def finish_shard(out: Path, shard: tuple[int, int] | None) -> None:
    """Last of all, once every output of the shard is written: the marker naming its manifest."""
    if shard is not None:
        atomic_write(out / FINISHED_FILE, hashlib.sha256((out / SHARD_FILE).read_bytes()).hexdigest() + "\n")


@dataclass
class Shard:
    folder: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.manifest['index']}/{self.manifest['count']}"

    def command(self) -> str:
        """The command that (re)runs this shard: it resumes, grading only what is not current."""
        language = self.manifest.get("language") or i18n.DEFAULT_LANGUAGE
        only = f" --assignment {self.manifest['assignment']}" if self.manifest.get("assignment") else ""
        return f"attnkit grade --submitted {self.manifest.get('submitted', '…')} --out {self.folder} --shard {self.name} --lang {language}{only}"


@dataclass
class Take:
    """What the merge takes from one shard."""

    shard: Shard
    keys: list[str]  # student/assignment, the students it owns
    not_taken: int  # results.json files in its folder that it does not own (a removed student, an older cut)


@dataclass
class Plan:
    takes: list[Take] = field(default_factory=list)
    language: str = i18n.DEFAULT_LANGUAGE
    submitted: str = ""
    skipped: list[dict[str, str]] = field(default_factory=list)


def is_locked(folder: Path) -> str | None:
    """Who holds ``folder``'s output lock (``store.output_lock``), or None when nobody does."""
    try:
        handle = open(folder / LOCK_FILE, encoding="utf-8")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or _("另一个进程")
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((folder / SHARD_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise GraderError(_("{path} 无法读取：{error}").format(path=folder / SHARD_FILE, error=error)) from None
    if not isinstance(found, dict):
        raise GraderError(_("{path} 无法读取：{error}").format(path=folder / SHARD_FILE, error=type(found).__name__))
    return found


def is_finished(folder: Path) -> bool:
    try:
        marker = (folder / FINISHED_FILE).read_text(encoding="utf-8").strip()
        return marker == hashlib.sha256((folder / SHARD_FILE).read_bytes()).hexdigest()
    except OSError:
        return False


def shown_identity(shard: Shard, identity: str) -> str:
    """A shard's class listing, grader or language, short enough for a message."""
    value: Any = shard.manifest.get(identity)
    if identity == "class":
        return _("{size} 份提交的名单 {digest}").format(size=value["size"], digest=value["digest"][:12])
    if identity == "grader":
        return "attnkit " + value["version"] + " " + ", ".join(f"{name} {digest[:12]}" for name, digest in value["suites"].items())
    return str(value)


def groups(shards: list[Shard], identity: str) -> str:
    """The shards that share each value of ``identity``: "1/4 (folder), 2/4 (folder): value; …"."""
    by: dict[str, list[str]] = {}
    for shard in shards:
        by.setdefault(shown_identity(shard, identity), []).append(f"{shard.name} ({shard.folder})")
    return _("；").join(f"{i18n.join(names)}: {value}" for value, names in by.items())


def plan_merge(folders: list[Path], language: str | None) -> Plan | None:
    """Check a set of shard folders and say what to take from each (None: these are whole runs,
    no shard among them, which ``store.check_shard_set`` checks as before). Every refusal names
    the shard and the command that fixes it."""
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise GraderError(_("找不到要合并的文件夹：{folders}").format(folders=i18n.join(missing)))
    found = [(folder, read_manifest(folder)) for folder in folders]
    if all(manifest is None for _folder, manifest in found):
        return None
    unsharded = [str(folder) for folder, manifest in found if manifest is None]
    if unsharded:
        raise GraderError(_("这些文件夹不是用 --shard 评的，不能与分片混合合并：{folders}").format(folders=i18n.join(unsharded)))
    shards = [Shard(folder, manifest) for folder, manifest in found if manifest is not None]
    for shard in shards:
        if shard.manifest.get("format") != FORMAT:
            raise GraderError(
                _("{folder} 是旧版 attnkit 评的分片，没有记录它评了哪些学生、用的哪个评分程序：请再运行一次它的命令（未变化的提交不会重评）：{command}").format(
                    folder=shard.folder, command=shard.command()
                )
            )
    for shard in shards:
        holder = is_locked(shard.folder)
        if holder is not None:
            raise GraderError(
                _("分片 {shard}（{folder}）仍在运行（{holder}）：请等它结束后再合并").format(shard=shard.name, folder=shard.folder, holder=holder)
            )
    for shard in shards:
        if not is_finished(shard.folder):
            raise GraderError(
                _("分片 {shard}（{folder}）没有评完（被中断，或仍在另一台机器上运行）：请再运行一次它的命令，它会从中断处继续（只评剩下的）：{command}").format(
                    shard=shard.name, folder=shard.folder, command=shard.command()
                )
            )
    counts = {shard.manifest["count"] for shard in shards}
    if len(counts) != 1:
        raise GraderError(_("分片总数不一致：{counts}（每个分片都要用同一个 n 运行 --shard i/n）").format(counts=sorted(counts)))
    count = counts.pop()
    seen: dict[int, Path] = {}
    for shard in shards:
        index = shard.manifest["index"]
        if index in seen:
            raise GraderError(_("分片 {index}/{count} 出现两次：{first} 与 {second}").format(index=index, count=count, first=seen[index], second=shard.folder))
        seen[index] = shard.folder
    absent = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if absent:
        raise GraderError(_("分片不全，缺少 {missing}：请先运行 attnkit grade --shard {first} …，再合并").format(missing=i18n.join(absent), first=absent[0]))
    if len({json.dumps(shard.manifest["grader"], sort_keys=True) for shard in shards}) != 1:
        raise GraderError(
            _("分片不是同一个评分程序评的（attnkit 版本或隐藏测试不同）：{groups}。请用同一个 attnkit 与隐藏测试再运行落后的分片（它们会重评）").format(
                groups=groups(shards, "grader")
            )
        )
    languages = {shard.manifest["language"] for shard in shards}
    if len(languages) != 1:
        raise GraderError(
            _("分片是用不同语言评的：{groups}。反馈页与 results.json 的文字随语言而定：请用同一个 --lang 再运行其余分片（它们会重评）").format(
                groups=groups(shards, "language")
            )
        )
    set_language = languages.pop()
    if language is not None and language != set_language:
        raise GraderError(
            _("这组分片是用 --lang {shards} 评的，合并却要求 --lang {merge}：请去掉 --lang（合并沿用分片的语言），或用 --lang {merge} 重新评所有分片").format(
                shards=set_language, merge=language
            )
        )
    if len({json.dumps(shard.manifest["class"], sort_keys=True) for shard in shards}) != 1:
        raise GraderError(
            _(
                "分片取自不同的学生名单（班级在分片之间变了：有人迟交或被移除）：{groups}。请再运行每个分片的命令（未变化的提交不会重评，只评新的），再合并"
            ).format(groups=groups(shards, "class"))
        )
    plan = Plan(language=set_language, submitted=shards[0].manifest.get("submitted", ""))
    owned_total = 0
    for shard in sorted(shards, key=lambda s: s.manifest["index"]):
        plan.takes.append(take_from(shard, count))
        owned_total += len(shard.manifest["students"])
        for item in shard.manifest.get("skipped", []):
            if item not in plan.skipped:
                plan.skipped.append(item)
    size = shards[0].manifest["class"]["size"]
    if owned_total != size:
        raise GraderError(_("这组分片共拥有 {owned} 份提交，而它们的学生名单有 {size} 份：请再运行每个分片的命令，再合并").format(owned=owned_total, size=size))
    return plan


def take_from(shard: Shard, count: int) -> Take:
    """The keys ``shard`` owns, each checked: its owner by the hash, a results.json there, graded
    at the fingerprint the manifest names (or recorded as not graded)."""
    owned: dict[str, str] = shard.manifest["students"]
    keys = sorted(owned)
    for key in keys:
        student_id, _slash, assignment = key.rpartition("/")
        if owner(student_id, count) != shard.manifest["index"]:
            raise GraderError(
                _("分片 {shard}（{folder}）记录的学生 {student} 不属于它（按学号的散列属于分片 {owner}/{count}）：请再运行一次它的命令：{command}").format(
                    shard=shard.name, folder=shard.folder, student=student_id, owner=owner(student_id, count), count=count, command=shard.command()
                )
            )
        path = results_path(shard.folder, {"student_id": student_id, "assignment": assignment})
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results = None
        if not isinstance(results, dict) or (results.get("fingerprint") != owned[key] and not results.get("not_graded")):
            raise GraderError(
                _("分片 {shard}（{folder}）里 {student} 的结果缺失或不是它这次评的（旧的结果）：请再运行一次它的命令：{command}").format(
                    shard=shard.name, folder=shard.folder, student=key, command=shard.command()
                )
            )
    present = {f"{path.parent.parent.name}/{path.parent.name}" for path in shard.folder.glob("students/*/*/results.json")}
    return Take(shard, keys, len(present - set(owned)))


def check_against_class(plan: Plan, jobs: Sequence[Job]) -> None:
    """The set against the class as it is now (the same submissions folder read again): a
    student added or removed since, or a submission changed since its shard graded it, is
    refused, naming the shard that owns it."""
    shards = [take.shard for take in plan.takes]
    current = class_digest(jobs)
    if current != shards[0].manifest["class"]["digest"]:
        now, then = {key_of(j.student_id, j.assignment) for j in jobs}, {k for take in plan.takes for k in take.keys}
        added = sorted(now ^ then)
        raise GraderError(
            _("提交文件夹里的班级在分片评完之后变了（新增或移除了学生：{added}）：请再运行每个分片的命令（未变化的提交不会重评，只评新的），再合并").format(
                added=i18n.join(added[:5]) or "—"
            )
        )
    fingerprints = {key_of(j.student_id, j.assignment): j.fingerprint for j in jobs}
    for take in plan.takes:
        changed = [key for key in take.keys if fingerprints.get(key) != take.shard.manifest["students"][key]]
        if changed:
            raise GraderError(
                _("分片 {shard}（{folder}）评过之后，提交或评分程序变了（{students}）：它的结果已过时，请再运行一次它的命令：{command}").format(
                    shard=take.shard.name, folder=take.shard.folder, students=i18n.join(changed[:5]), command=take.shard.command()
                )
            )


def forget_unmerged(out: Path, keys: Iterable[str]) -> list[str]:
    """A merge's OUT holds the merged class only: the submissions an earlier merge wrote there
    and this one does not (a student removed from the class since) go, so that nothing read
    from OUT later (``attnkit lms-feedback``, a TA's copy) finds them. Only what a merge wrote,
    as ``merged.json`` lists it, is ever removed. Returns the keys removed."""
    keys = sorted(set(keys))
    try:
        earlier = json.loads((out / MERGED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = []
    students = (out / STUDENTS_FOLDER).resolve()
    removed = []
    for key in sorted(set(earlier if isinstance(earlier, list) else []) - set(keys)):
        student_id, _slash, assignment = str(key).rpartition("/")
        folder = results_path(out, {"student_id": student_id, "assignment": assignment}).parent
        if folder.resolve().parent.parent != students:
            continue  # not a folder of OUT/students/<student>/<assignment>: never touched
        for name in ("results.json", "feedback.html"):
            (folder / name).unlink(missing_ok=True)
        for empty in (folder, folder.parent):
            try:
                empty.rmdir()
            except OSError:
                break
        removed.append(str(key))
    atomic_write(out / MERGED_FILE, json.dumps(keys, ensure_ascii=False, indent=1))
    return removed

"""``attnkit grade | check | collect | merge``: the command line (README, "Commands")."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

# numpy's OpenBLAS starts a thread per CPU when it is imported; this process does no linear algebra
# and forks its workers, which must not inherit a half-copied thread pool (an idle pool also spins).
# Set, not defaulted: a TA's OPENBLAS_NUM_THREADS=8 would otherwise leave threads alive at the fork
# (tests/sandbox/test_fork_threads.py).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
if __name__ == "__main__":  # ``python -m attnkit.cli``; the ``attnkit`` script starts it in attnkit.launch
    from attnkit.driver import seed

    seed.start_for(sys.argv[1:])

# Only what the parser needs: ``attnkit --help`` and ``attnkit collect --help`` import no torch,
# nbformat or rich. The commands' modules come in ``import_commands``, once the arguments parsed.
from attnkit import __version__
from attnkit.constants import AUTOGRADER_ROOT, GraderError
from attnkit import cpu_account, i18n
from attnkit.i18n import _
from attnkit.course.settings import AttnkitCourse, AttnkitLimits, AttnkitServe, KitSettings, add_flags, command_line_values

if TYPE_CHECKING:
    from attnkit.assignment.folder import Assignment
    from attnkit.records import ResultsJson


# The modules each command needs: grade and check grade (torch above all, through the engine's
# workers); the others only read and write files (no torch).
COMMAND_MODULES = {
    "grade": ("assignment.folder", "pipeline.grade", "engine.fan_out", "report.pages", "intake.jobs", "driver.seed", "report.store"),
    "check": ("assignment.folder", "pipeline.check", "engine.fan_out", "report.pages", "intake.jobs", "driver.seed", "report.store"),
    "merge": ("assignment.folder", "pipeline.console", "pipeline.class_record", "report.store", "report.shard_set"),
    "lms-feedback": ("assignment.folder", "pipeline.console", "pipeline.class_record", "course.lms_upload", "report.store"),
    "collect": ("assignment.folder", "pipeline.console", "intake.lms_collect"),
    "serve": ("service.serve",),
    "serve --hub": ("service.settings",),  # the hub side starts first; then "serve"'s
    "serve --status": ("service.status",),  # the database only: no engine, no torch
    "submit": ("service.http_submit",),
    "course": ("course.secure", "course.student_config"),
    "lms-sync": ("lms.passback",),  # no torch: the gradebook and HTTP
    "config": ("course.settings",),
}


def import_commands(command: str) -> None:
    """The modules ``command`` needs (``COMMAND_MODULES``). Their imports make some 200,000
    objects (torch's, for grade) and next to no garbage: the collections they would trigger walk
    an ever larger heap for nothing, a quarter of a second of every command's start. Once they
    are in, they are frozen out of the collector's view for good."""
    collecting = gc.isenabled()
    gc.disable()
    for name in COMMAND_MODULES[command]:
        importlib.import_module(f"attnkit.{name}")
    gc.freeze()
    if collecting:
        gc.enable()


def parse_shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError("--shard takes i/n, e.g. 1/4") from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError("--shard i/n needs 1 <= i <= n")
    return index, count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnkit", description="Grade a class's notebooks with hidden test suites, in sandboxes.")
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    parser.add_argument("--verbose", action="store_true", help="more detail: each graded submission, and the traceback of a failure")
    language = argparse.ArgumentParser(add_help=False)
    language.add_argument(
        "--lang",
        choices=i18n.LANGUAGES,
        default=None,
        help=f"language of the console output, report.html and feedback pages (default: ${i18n.ENV_VARIABLE}, else zh)",
    )
    parser.add_argument("--lang", choices=i18n.LANGUAGES, default=None, dest="top_lang", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True)
    grade = commands.add_parser("grade", parents=[language], help="grade a class in nbgrader's layout")
    grade.add_argument("--submitted", type=Path, required=True, help="DIR/<student_id>/<assignment>/<notebook>.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="where grades.csv, report.html and per-student results go")
    grade.add_argument("--jobs", type=int, default=None, help="parallel workers (default: number of cores)")
    grade.add_argument("--assignment", default=None, help="only this assignment folder")
    grade.add_argument("--force", action="store_true", help="regrade even unchanged submissions")
    grade.add_argument("--shard", type=parse_shard, default=None, help="grade only slice i/n (merge later)")
    grade.add_argument("--gradebook", type=Path, default=None, help="also record scores in this nbgrader gradebook.db")
    grade.add_argument("--autograder", type=Path, default=AUTOGRADER_ROOT, help=argparse.SUPPRESS)
    add_flags(grade, AttnkitLimits)
    grade.add_argument("--quiet", action="store_true", help="no progress bar or table")
    grade.add_argument(
        "--no-isolation",
        action="store_true",
        help="run the notebooks without an isolated sandbox where the OS gives none: only for notebooks you trust",
    )
    grade.add_argument("--insecure-course", action="store_true", help=INSECURE_HELP)

    check = commands.add_parser("check", parents=[language], help="grade one notebook (self-study) and print the feedback")
    check.add_argument("notebook", type=Path)
    check.add_argument("--out", type=Path, default=None, help="keep the outputs here (default: a temporary folder)")
    check.add_argument("--assignment", default=None, help="the assignment (default: the one whose notebook has this file's name)")

    intake = commands.add_parser(
        "collect", parents=[language], help="turn a Canvas, Moodle or Blackboard download (folder or zip) into submitted/<id>/<assignment>/"
    )
    intake.add_argument("sources", type=Path, nargs="+", help="the downloaded folder(s) or zip file(s)")
    intake.add_argument("--submitted", type=Path, required=True, help="where to put DIR/<student_id>/<assignment>/<notebook>.ipynb")
    intake.add_argument("--assignment", default=None, help="the assignment these files belong to (default: each file's, by its notebook's name)")
    intake.add_argument(
        "--lms", choices=["canvas", "moodle", "blackboard"], default=None, help="the LMS that made the download (default: detected once for the whole download)"
    )
    intake.add_argument("--timezone", default=None, help="the LMS's time zone for times a zip or Blackboard gives without one (IANA name; default UTC)")

    feedback = commands.add_parser(
        "lms-feedback", parents=[language], help="the LMS bulk-feedback zips of a graded class that `attnkit collect` placed (grade writes them too)"
    )
    feedback.add_argument("--submitted", type=Path, required=True, help="the submitted/ folder `attnkit collect` filled")
    feedback.add_argument("--out", type=Path, required=True, help="the graded output (of `attnkit grade` or `attnkit merge`)")

    serve = commands.add_parser("serve", parents=[language], help="grade each nbgrader submit as it arrives (docs/service.md); run from the course root")
    serve.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    serve.add_argument("--jobs", type=int, default=None, help="warm workers (default: number of cores)")
    serve.add_argument("--gradebook", type=Path, default=None, help="the course's gradebook.db (default: COURSE/gradebook.db)")
    serve.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on 127.0.0.1:PORT")
    serve.add_argument("--status", action="store_true", help="print the queue, what is in flight and the last hour, then exit")
    serve.add_argument("--replica-id", default="", help="this replica's name in a shared queue (default: host name and pid)")
    serve.add_argument(
        "--hub",
        action="store_true",
        help="also serve students' pages and submit over HTTP as a JupyterHub-managed service (docs/hub.md; the hub's JUPYTERHUB_* variables say where)",
    )
    serve.add_argument("--autograder", type=Path, default=AUTOGRADER_ROOT, help=argparse.SUPPRESS)
    add_flags(serve, AttnkitLimits, AttnkitServe)
    serve.add_argument("--insecure-course", action="store_true", help=INSECURE_HELP)

    course = commands.add_parser("course", parents=[language], help="the course folder's own care (attnkit course secure)")
    course_commands = course.add_subparsers(dest="course_command", required=True)
    secure = course_commands.add_parser(
        "secure",
        parents=[language],
        help="make the course's hidden parts (answers, hidden suites, gradebook, submissions, the service's folder) readable by you and the TA group only",
    )
    secure.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    add_flags(secure, AttnkitCourse)
    student_config = course_commands.add_parser(
        "student-config",
        parents=[language],
        help="the lines of the students' nbgrader_config.py (course id, exchange), printed or written into their environment (docs/student-environment.md)",
    )
    student_config.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    student_config.add_argument(
        "--into", type=Path, default=None, help="the students' virtualenv: write VENV/etc/jupyter/nbgrader_config.py there (default: print the lines)"
    )
    student_config.add_argument("--course-id", default=None, help="the course id, without reading a course (an image built away from it)")
    student_config.add_argument(
        "--exchange", default=None, help="the exchange's root (default: the course's Exchange.root, else nbgrader's /srv/nbgrader/exchange)"
    )

    configuration = commands.add_parser("config", parents=[language], help="print every setting of the kit, its value and where it came from")
    configuration.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py; default: here)")
    add_flags(configuration, AttnkitLimits, AttnkitServe, AttnkitCourse)

    submit = commands.add_parser(
        "submit", parents=[language], help="submit a notebook to the course's attnkit service in JupyterHub, from your own server (docs/hub.md)"
    )
    submit.add_argument("notebook", type=Path, help="the notebook to submit")
    submit.add_argument("--assignment", required=True, help="the assignment it is for (e.g. ch19-attention)")
    submit.add_argument("--url", default=None, help="the service's address (default: $ATTNKIT_SERVICE_URL, e.g. https://hub.example.edu/services/attnkit/)")

    sync = commands.add_parser(
        "lms-sync",
        parents=[language],
        help="post the gradebook's scores to the course's LMS (LTI 1.3 Assignment and Grade Services; docs/lms.md); run from the course root",
    )
    sync.add_argument("--course", type=Path, default=Path("."), help="the course root (nbgrader_config.py with c.AttnkitLti; default: here)")
    sync.add_argument("--gradebook", type=Path, default=None, help="the course's gradebook.db (default: as attnkit serve finds it)")
    sync.add_argument("--dry-run", action="store_true", help="print, per student, what the LMS holds and what would be posted; post nothing")

    merge = commands.add_parser("merge", parents=[language], help="combine shard outputs into one grades.csv and report")
    merge.add_argument("shards", type=Path, nargs="+", help="the --out folders of the shards")
    merge.add_argument("--out", type=Path, required=True)
    merge.add_argument("--gradebook", type=Path, default=None, help="record the merged class in this nbgrader gradebook.db (once, nothing regraded)")
    merge.add_argument(
        "--submitted", type=Path, default=None, help="the class's submissions folder (default: the shards' own), read again to check the set against it"
    )
    return parser


INSECURE_HELP = (
    "start although other users can read the course's hidden parts (a single-user machine only; "
    "c.AttnkitCourse.single_user = True says the same); otherwise run `attnkit course secure` first"
)


def command_grade(args: argparse.Namespace) -> int:
    """``attnkit grade`` (attnkit.pipeline.grade)."""
    from attnkit.pipeline.grade import GradeOptions, grade

    return grade(
        GradeOptions(
            submitted=args.submitted,
            out=args.out,
            autograder=args.autograder,
            assignment=args.assignment,
            jobs=args.jobs,
            force=args.force,
            shard=args.shard,
            gradebook=args.gradebook,
            quiet=args.quiet,
            verbose=args.verbose,
            no_isolation=args.no_isolation,
            secured=getattr(args, "secured", None),  # main's secure_gradebook_course
            settings=command_line_values(args),
        )
    )


def command_lms_sync(args: argparse.Namespace) -> int:
    """``attnkit lms-sync [--dry-run]`` (attnkit.lms.passback.sync)."""
    from attnkit.lms.passback import sync
    from attnkit.service.settings import gradebook_of

    return sync(args.course, gradebook_of(args.course, args.gradebook), args.dry_run)


def command_check(args: argparse.Namespace) -> int:
    """``attnkit check`` (attnkit.pipeline.check): one notebook through the grade pipeline."""
    from attnkit.pipeline.check import check

    return check(args.notebook, args.out, args.assignment)


def command_merge(args: argparse.Namespace) -> int:
    from attnkit.assignment.folder import discover
    from attnkit.pipeline.class_record import gather_plan, gradebook_lateness
    from attnkit.pipeline.console import console, print_merge_plan
    from attnkit.report.shard_set import check_against_class, forget_unmerged, plan_merge
    from attnkit.report.store import check_shard_set, gather_shards, write_class_outputs

    started = time.perf_counter()
    suites = discover()
    plan = plan_merge(args.shards, getattr(args, "lang", None) or args.top_lang)
    submitted = args.submitted
    if plan is None:  # whole runs (two sections of a class, say): no shard set to prove
        check_shard_set(args.shards)
        all_results, skipped = gather_shards(args.shards, args.out)
    else:
        # The set's language is the merge's: its report speaks as its pages do.
        i18n.set_language(plan.language)
        submitted = submitted or (Path(plan.submitted) if plan.submitted else None)
        if submitted is not None and submitted.is_dir():
            from attnkit.intake.jobs import find_jobs

            check_against_class(plan, find_jobs(submitted, suites, plan.takes[0].shard.manifest.get("assignment")).jobs)
        else:
            console.print(_("未找到提交文件夹 {folder}：没有再对照它检查这组分片（可用 --submitted 指定）").format(folder=submitted), markup=False)
        # With a gradebook, nbgrader's lateness is known before each record lands in the merge's
        # folder (written once, as a grade run writes it).
        late_of = None
        if args.gradebook is not None:
            keys = [(student, assignment) for take in plan.takes for student, _slash, assignment in (key.rpartition("/") for key in take.keys)]
            late_of = gradebook_lateness(args.gradebook, submitted if submitted is not None and submitted.is_dir() else None, keys)
        all_results, skipped = gather_plan(plan, args.out, late_of, suites)
        print_merge_plan(plan)
    for key in forget_unmerged(args.out, [f"{r['student_id']}/{r['assignment']}" for r in all_results]):
        console.print(_("{key} 已不在合并的班级中：删去了上次合并留在 {out} 的结果").format(key=key, out=args.out), markup=False)
    if args.gradebook is not None:
        record_merged(args, all_results, suites, skipped, submitted, started)
    else:
        write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped)
    console.print(_("合并了 {count} 份结果，写入 {out}").format(count=len(all_results), out=args.out), markup=False)
    if skipped:
        console.print(_("{skipped} 项被跳过（见 report.html）").format(skipped=len(skipped)), markup=False)
    return 1 if skipped or any(r.get("not_graded") for r in all_results) else 0


def record_merged(
    args: argparse.Namespace,
    all_results: list[ResultsJson],
    suites: dict[str, Assignment],
    skipped: list[dict[str, str]],
    submitted: Path | None,
    started: float,
) -> None:
    """The merged class into the gradebook once, then grades.csv and the report in their full
    form (manual points, late penalty, totals), as ``attnkit grade --gradebook`` writes them."""
    from attnkit.pipeline.class_record import record_class
    from attnkit.report.store import write_class_outputs

    folder = submitted if submitted is not None and submitted.is_dir() else None
    totals = record_class(args.gradebook, folder, args.out, all_results, suites, quiet=False)
    write_class_outputs(args.out, all_results, suites, time.perf_counter() - started, skipped, totals)


def command_lms_feedback(args: argparse.Namespace) -> int:
    """The bulk-feedback zips of an output folder (after `merge`, or again after a TA's change)."""
    from attnkit.assignment.folder import discover
    from attnkit.pipeline.class_record import add_lms_lateness, report_lms_feedback
    from attnkit.pipeline.console import console
    from attnkit.report.store import collect

    if not args.submitted.is_dir():
        raise GraderError(_("找不到提交文件夹：{folder}").format(folder=args.submitted))
    suites = discover()
    all_results = [r for r in collect(args.out) if r.get("assignment") in suites]
    if not all_results:
        raise GraderError(_("{out} 里没有评分结果（先运行 attnkit grade）").format(out=args.out))
    add_lms_lateness(args.out, all_results, args.submitted, suites)
    packed = report_lms_feedback(args.out, args.submitted, all_results, quiet=False)
    if not packed.archives:
        console.print(_("没有写出任何压缩包：这些提交不是 attnkit collect 从 Canvas 或 Moodle 收取的"), markup=False)
    return 1 if packed.left_out else 0


def command_collect(args: argparse.Namespace) -> int:
    """Place an LMS download; exit 1 if any file could not be placed (each one is listed)."""
    from attnkit.assignment.folder import assignment_for, discover
    from attnkit.pipeline.console import print_collected
    from attnkit.intake.lms_collect import collect as collect_download
    from attnkit.intake.lms_collect import timezone

    suites = discover()
    # Each file's assignment is the one whose notebook it is named after (--assignment: this one only).
    chosen = [assignment_for(suites, args.assignment, "")] if args.assignment else list(suites.values())
    try:
        zone = timezone(args.timezone)
    except ValueError as error:
        raise GraderError(str(error)) from None
    found = collect_download(args.sources, args.submitted, {suite.name: [Path(suite.notebook).stem] for suite in chosen}, args.lms, zone)
    print_collected(found, args.submitted)
    if found.unplaced:
        return 1
    return 0


def command_submit(args: argparse.Namespace) -> int:
    """POST a notebook to the hub service with the user's own token ($JUPYTERHUB_API_TOKEN, which
    JupyterHub gives every single-user server): the service takes the user from the hub, not from here."""
    import urllib.error

    from attnkit.service.http_submit import Refused, post_notebook, read_notebook

    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    url = args.url or os.environ.get("ATTNKIT_SERVICE_URL", "")
    if not token or not url:
        raise GraderError(_("需要 JUPYTERHUB_API_TOKEN（JupyterHub 里的服务器自带）和服务地址（--url 或 ATTNKIT_SERVICE_URL）"))
    try:
        answer = post_notebook(url, token, args.assignment, read_notebook(args.notebook))
    except Refused as refused:
        raise GraderError(_("无法提交：{reason}").format(reason=refused)) from None
    except urllib.error.HTTPError as error:
        reason = error.read(4096).decode("utf-8", "replace").strip()
        raise GraderError(_("评分服务拒绝了这次提交（HTTP {code}）：{reason}").format(code=error.code, reason=reason)) from None
    except (OSError, ValueError) as error:
        raise GraderError(_("无法提交：{reason}").format(reason=error)) from None
    print(json.dumps(answer, ensure_ascii=False))
    return 0


def command_serve(args: argparse.Namespace) -> int:
    """The on-submit service (attnkit.service.serve); ``--status`` only reads its database."""
    from attnkit.service import settings
    from attnkit.service.status import status

    hub_side = None
    if args.hub and not args.status and (args.course / "nbgrader_config.py").is_file():
        # First thing, before the course's config (a second), torch and the suites (seconds):
        # JupyterHub serves nothing, its login page included, until its managed service answers
        # (issue 49). The hub side reads the course itself once it answers; a second service on
        # the course stops at the course's lock below, its hub side at the hub side's own.
        from attnkit.service import hub_process
        from attnkit.service.http_submit import hub_missing

        if hub_missing():
            raise GraderError(hub_missing())
        listening = hub_process.listen()
        given_queue = getattr(args, "AttnkitServe.queue_url") or ""  # the hub side reads the course's own once it answers
        hub_side = hub_process.start(args.course, args.autograder, settings.state_folder(args.course), "", given_queue, sys.stderr, listening)
        import_commands("serve")
    if args.status:
        # What would stop the service at its start said first, then the queue (read without the
        # configuration's queue_url when the configuration itself is what is broken).
        from attnkit.service.status import problems

        found = problems(args.course, args.autograder)
        try:
            queue_url = KitSettings.load(args.course, command_line_values(args)).serve.queue_url or None
        except GraderError:
            queue_url = getattr(args, "AttnkitServe.queue_url") or None
        for problem in found:
            print(_("无法启动：{problem}").format(problem=problem))
        print(status(args.course, queue_url))
        return 2 if found else 0
    kit_settings = KitSettings.load(args.course, command_line_values(args))
    queue_url = kit_settings.serve.queue_url or None
    from attnkit.course.secure import refuse_if_exposed

    refuse_if_exposed(args.course, "attnkit serve", args.insecure_course)  # before torch: a refusal says so at once
    import torch

    from attnkit.service import serve

    from attnkit.assignment.folder import solutions_beside
    from attnkit.driver.seed import take as take_seed

    torch.set_num_threads(1)  # workers are forked from here, as in grade
    course = settings.load_course(args.course)
    gradebook = settings.gradebook_of(args.course, args.gradebook)
    limits = kit_settings.limits.limits()
    from attnkit.boundary.policy import hidden_paths

    hide = hidden_paths(args.course, course.exchange, args.autograder, solutions_beside(args.autograder))
    workers = args.jobs or len(os.sched_getaffinity(0))
    service = serve.Service(
        course,
        args.autograder,
        workers,
        limits,
        hide,
        gradebook,
        args.metrics_port,
        take_seed(),
        queue_url=queue_url,
        replica=args.replica_id,
        lease_seconds=kit_settings.serve.lease_seconds,
        metrics_host=kit_settings.serve.metrics_host,
        hub=args.hub,
        hub_process=hub_side,
    )
    return serve.serve(service)


def command_course(args: argparse.Namespace) -> int:
    """``attnkit course secure`` (attnkit.course.secure), ``attnkit course student-config`` (attnkit.course.student_config)."""
    if args.course_command == "student-config":
        from attnkit.course.student_config import command_student_config

        return command_student_config(args.course, args.into, args.course_id, args.exchange)
    from attnkit.course.secure import command_secure

    return command_secure(args.course, getattr(args, "AttnkitCourse.ta_group"))


def command_config(args: argparse.Namespace) -> int:
    """``attnkit config``: every setting, its value and where it came from (attnkit.course.settings)."""
    from attnkit.course.settings import print_settings

    print_settings(KitSettings.load(args.course if (args.course / "nbgrader_config.py").is_file() else None, command_line_values(args)))
    return 0


def leave_working_directory(args: argparse.Namespace) -> None:
    """The grader must not depend on the folder it was started in: a TA's shell may sit in one
    the grader's user cannot even enter (a checkout under a root-only ``mktemp -d``), where
    pytest, which goes back to its starting folder at the end of a session, would fail. The
    paths given are made absolute against it, then every command runs from ``/``."""
    for name, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, name, value.absolute())
        elif isinstance(value, list) and value and all(isinstance(item, Path) for item in value):
            setattr(args, name, [item.absolute() for item in value])
    try:
        os.chdir("/")
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import_commands(f"serve {'--status' if args.status else '--hub'}" if args.command == "serve" and (args.status or args.hub) else args.command)
    i18n.set_language(getattr(args, "lang", None) or args.top_lang)
    leave_working_directory(args)
    command = {
        "grade": command_grade,
        "check": command_check,
        "merge": command_merge,
        "collect": command_collect,
        "lms-feedback": command_lms_feedback,
        "serve": command_serve,
        "submit": command_submit,
        "course": command_course,
        "lms-sync": command_lms_sync,
        "config": command_config,
    }[args.command]
    from attnkit.pipeline.console import console, print_error
    from attnkit.report.store import output_lock

    try:
        if args.command == "grade":  # before the output's lock makes OUT: a refused run makes nothing
            from attnkit.pipeline.grade import secure_gradebook_course

            args.secured = secure_gradebook_course(args.gradebook, args.out, args.insecure_course)
        if args.command in ("grade", "merge", "lms-feedback"):
            with output_lock(args.out):
                return command(args)
        return command(args)
    except GraderError as error:
        print_error(error, traceback.format_exc() if args.verbose else None, args.command)
        return 2
    except KeyboardInterrupt:
        # Every graded submission was written as it arrived; the next run skips those.
        console.print("\n" + _("已中断。已评完的提交都已保存；再次运行同一条命令即可从中断处继续（只评剩下的）。"), markup=False)
        return 130


def run() -> None:
    """Console entry point: ``main`` then a prompt exit. Everything is written and flushed by
    then; an orderly interpreter exit with torch loaded costs about a second per command."""
    code = main()
    cpu_account.own("parent")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()

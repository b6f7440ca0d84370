"""The student's environment in one command (docs/student-environment.md, issue 51).

``student_env`` (tests/conftest.py) runs ``make student-wheels``, makes an empty venv of the host's
Python and runs the doc's install line as typed. Then, in that venv: torch's CPU build imports, the
release notebook filled with a student's answers runs cell by cell in a real kernel (the venv's
own), nbgrader's lab extensions are there, and the installed tree holds nothing of the hidden
suites, their reference or the model answers. As a real unix user of the host, with the lines
``attnkit course student-config --into`` wrote into the venv, the venv's nbgrader lists, fetches
and submits through a real exchange, and the submission is that user's. (``attnkit submit`` from
this venv against a real hub: tests/service/test_service_hub.py.)
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from commands import BIN, ROOT, run_command

ASSIGNMENT = "ch19-attention"
ANSWERS = ROOT / "examples" / "submitted" / "xiaolin" / ASSIGNMENT / "attention.ipynb"  # a student's correct answers
LAB_EXTENSION = json.loads((ROOT / "labextension" / "package.json").read_text(encoding="utf-8"))["name"]  # the kit's JupyterLab extension


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def test_student_config_prints_the_courses_id_and_exchange(tmp_path: Path) -> None:
    """The lines come from the course's nbgrader_config.py, and nbgrader's own loader reads them back."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    with open(tmp_path / "nbgrader_config.py", "a") as config:
        config.write("\nc.Exchange.root = '/srv/exchange-of-the-test'\nc.Exchange.path_includes_course = True\n")
    done = run_command([BIN / "attnkit", "course", "student-config", "--course", tmp_path], timeout=120)
    assert done.returncode == 0, done.stderr
    student = tmp_path / "student"
    student.mkdir()
    (student / "nbgrader_config.py").write_text(done.stdout)
    from traitlets.config.loader import PyFileConfigLoader

    loaded = PyFileConfigLoader("nbgrader_config.py", path=str(student)).load_config()
    assert loaded.CourseDirectory.course_id == "ch19"
    assert loaded.Exchange.root == "/srv/exchange-of-the-test" and loaded.Exchange.path_includes_course is True
    assert "db_url" not in done.stdout and "source_directory" not in done.stdout, "only what a student's nbgrader needs"
    given = run_command(
        [BIN / "attnkit", "course", "student-config", "--course-id", "ml101", "--exchange", "/mnt/x", "--course", "/nonexistent"], timeout=120
    )
    assert given.returncode == 0 and "c.CourseDirectory.course_id = 'ml101'" in given.stdout and "c.Exchange.root = '/mnt/x'" in given.stdout, given.stderr


def test_the_doc_gives_the_install_line_the_make_target_and_the_dockerfile() -> None:
    doc = (ROOT / "docs" / "student-environment.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert 'bin/pip install -c dist/student/constraints.txt -f dist/student "attnkit[student]"' in doc
    assert '/bin/pip install --disable-pip-version-check -c $(STUDENT_WHEELS)/constraints.txt -f $(STUDENT_WHEELS) "attnkit[student]"' in makefile
    assert "```dockerfile" in doc and '-c /tmp/student/constraints.txt -f /tmp/student "attnkit[student]"' in doc
    for page in ("README.md", "docs/hub.md"):
        assert "student-environment.md" in (ROOT / page).read_text(encoding="utf-8"), f"{page} links the student's environment"


@pytest.mark.slow
@pytest.mark.e2e
def test_the_one_command_installs_torch_cpu_nbgrader_lab_and_attnkit(student_env) -> None:
    bin_ = student_env.bin
    versions = "import torch, nbgrader as nb, jupyterlab as lab; print(torch.__version__, torch.version.cuda, nb.__version__, lab.__version__)"
    probe = run_command([bin_ / "python", "-c", versions], timeout=300)
    assert probe.returncode == 0, probe.stderr
    torch_version, cuda, nbgrader_version, lab_version = probe.stdout.split()
    assert torch_version.startswith("2.13.0") and cuda == "None", f"torch's CPU build: {probe.stdout}"
    assert nbgrader_version == "0.9.6" and lab_version.startswith("4."), probe.stdout
    assert (bin_ / "jupyterhub-singleuser").is_file(), "a hub's spawner starts jupyterhub-singleuser from this venv"
    assert run_command([bin_ / "attnkit", "submit", "--help"], timeout=120).returncode == 0
    # `attnkit submit` imports only what posting a notebook needs: no torch, no grading engine, no hub library.
    heavy = "('torch', 'attnkit.engine.fan_out', 'jupyterhub')"
    imports = f"import sys, attnkit.cli as c; c.import_commands('submit'); print(sorted(m for m in {heavy} if m in sys.modules))"
    assert run_command([bin_ / "python", "-c", imports], timeout=120).stdout.strip() == "[]"
    extensions = run_command([bin_ / "jupyter", "labextension", "list"], timeout=300)
    assert "@jupyter/nbgrader" in extensions.stdout + extensions.stderr, extensions.stdout + extensions.stderr
    # The kit's own extension (issue 51), from the prebuilt wheel: no Node in the student's environment.
    assert LAB_EXTENSION in extensions.stdout + extensions.stderr, extensions.stdout + extensions.stderr


@pytest.mark.slow
@pytest.mark.e2e
def test_the_installed_tree_holds_no_hidden_suite_reference_or_answers(student_env) -> None:
    """No file of autograder/ or solutions/ is in the venv (by content: the same bytes under any
    name), no folder of theirs, and attnkit's own record lists only the package and its command."""
    hidden = {}
    for folder in (ROOT / "autograder", ROOT / "solutions"):
        for path in folder.rglob("*"):
            if path.is_file() and path.stat().st_size >= 64 and "__pycache__" not in path.parts:  # an empty __init__.py is anybody's
                hidden[hashlib.sha256(path.read_bytes()).hexdigest()] = path
    assert any(p.name == "reference.py" for p in hidden.values()) and any(p.suffix == ".ipynb" for p in hidden.values())
    found = []
    for path in student_env.venv.rglob("*"):
        if path.is_dir() and path.name in ("autograder", "solutions", "ch19_attention", "ch19-attention"):
            found.append(str(path))
        elif path.is_file() and not path.is_symlink() and path.stat().st_size < 5_000_000:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in hidden:
                found.append(f"{path} (= {hidden[digest]})")
    assert not found, found
    record = next(site_packages(student_env.venv).glob("attnkit-*.dist-info")) / "RECORD"
    listed = [line.split(",")[0] for line in record.read_text().splitlines()]
    outside = [name for name in listed if not name.startswith(("attnkit/", "attnkit-")) and name != "../../../bin/attnkit"]
    assert not outside, outside
    assert "attnkit/reference.py" not in listed and not any("/test_ch19" in name for name in listed)


@pytest.mark.slow
@pytest.mark.e2e
def test_the_notebooks_cells_run_in_a_real_kernel_of_the_student_venv(student_env, tmp_path: Path) -> None:
    """The release notebook with a student's answers, every cell through the venv's own kernel: no
    cell fails (the self-checks under each part included), and the kernel is the venv's."""
    notebook = json.loads(ANSWERS.read_text(encoding="utf-8"))
    probe = "import sys, torch\nprint('KERNEL', sys.prefix, torch.__version__)"
    notebook["cells"].insert(0, {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": probe})
    path = tmp_path / "attention.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    env = {"HOME": str(tmp_path), "PATH": f"{student_env.bin}{os.pathsep}/usr/bin:/bin", "LANG": "C.UTF-8", "MPLBACKEND": "Agg"}
    done = run_command(
        [student_env.bin / "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace", "--ExecutePreprocessor.timeout=300", path],
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    executed = json.loads(path.read_text(encoding="utf-8"))
    code = [cell for cell in executed["cells"] if cell["cell_type"] == "code"]
    errors = [output for cell in code for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors, errors[:2]
    printed = "".join("".join(output.get("text", "")) for output in code[0]["outputs"])
    assert f"KERNEL {student_env.venv}" in printed, printed
    assert all(cell.get("execution_count") for cell in code), "every code cell ran"


def as_student(user: str, home: Path, venv: Path, *command: str | Path) -> subprocess.CompletedProcess[str]:
    """``command`` as the student's own unix user, from their home, with only the venv on PATH."""
    env = [f"HOME={home}", f"PATH={venv / 'bin'}:/usr/bin:/bin", "LANG=C.UTF-8"]
    return run_command(["runuser", "-u", user, "--", "env", "-i", *env, *command], cwd=home, timeout=600)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.root
def test_a_unix_student_fetches_and_submits_with_the_venvs_nbgrader_and_the_config_written_into_it(student_env) -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("makes a unix user: root only")
    sys.path.insert(0, str(ROOT / "tests" / "course"))
    from test_nbgrader_exchange import instructor, nbgrader_utc

    base = Path(tempfile.mkdtemp(prefix="attnkit-student-exchange-"))
    base.chmod(0o755)
    user = f"akse{os.getpid() % 100000}"
    home = base / "home" / user
    try:
        exchange, course = base / "exchange", base / "course"
        exchange.mkdir()
        exchange.chmod(0o777)
        course.mkdir()
        (base / "home").mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(ROOT / "solutions", course / "solutions")
        shutil.copytree(ROOT / "assignments", course / "assignments")
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"\nc.Exchange.root = {str(exchange)!r}\n")
        due = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) + datetime.timedelta(days=1)
        instructor(course, str(BIN / "nbgrader"), "db", "assignment", "add", ASSIGNMENT, f"--duedate={nbgrader_utc(due)}")
        instructor(course, str(BIN / "nbgrader"), "release_assignment", ASSIGNMENT)
        instructor(course, str(BIN / "attnkit"), "course", "secure")
        # The doc's third line, as the TA runs it from the course root (once for every student).
        wrote = instructor(course, str(BIN / "attnkit"), "course", "student-config", "--into", str(student_env.venv))
        config = student_env.venv / "etc" / "jupyter" / "nbgrader_config.py"
        assert str(config) in wrote.stdout and config.stat().st_uid == 0 and config.stat().st_mode & 0o777 == 0o644
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh", user], check=True, capture_output=True)

        listed = as_student(user, home, student_env.venv, "nbgrader", "list")
        assert listed.returncode == 0 and ASSIGNMENT in listed.stdout + listed.stderr, listed.stdout + listed.stderr
        fetched = as_student(user, home, student_env.venv, "nbgrader", "fetch_assignment", ASSIGNMENT)
        assert fetched.returncode == 0, fetched.stdout + fetched.stderr
        notebook = home / ASSIGNMENT / "attention.ipynb"
        notebook.write_bytes(ANSWERS.read_bytes())
        shutil.chown(notebook, user, user)
        submitted = as_student(user, home, student_env.venv, "nbgrader", "submit", ASSIGNMENT)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        inbound = [entry for entry in (exchange / "ch19" / "inbound").iterdir() if entry.name.startswith(f"{user}+{ASSIGNMENT}+")]
        assert len(inbound) == 1 and inbound[0].stat().st_uid == int(subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
        assert (inbound[0] / "attention.ipynb").read_bytes() == ANSWERS.read_bytes()

        # nbgrader's instructor parts are off in the students' venv; the Assignment List is on.
        labs = as_student(user, home, student_env.venv, "jupyter", "labextension", "list")
        disabled = (labs.stdout + labs.stderr).partition("Disabled extensions:")[2]
        for plugin in ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:course-list"):
            assert plugin in disabled, labs.stdout + labs.stderr
        assert "assignment-list" not in disabled and "validate-assignment" not in disabled, disabled
        servers = as_student(user, home, student_env.venv, "jupyter", "server", "extension", "list")
        plain = re.sub(r"\x1b\[[0-9;]*m", "", servers.stdout + servers.stderr)  # its colours
        said = [line.split() for line in plain.splitlines() if re.fullmatch(r"\s*\S+ (enabled|disabled)\s*", line)]
        state = {words[0]: words[1] for words in said if words[0].startswith("nbgrader.")}
        assert state["nbgrader.server_extensions.formgrader"] == "disabled" and state["nbgrader.server_extensions.course_list"] == "disabled", state
        assert state["nbgrader.server_extensions.assignment_list"] == "enabled", state
    finally:
        subprocess.run(["userdel", "--remove", user], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

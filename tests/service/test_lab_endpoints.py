"""The lab extension's server endpoints (labextension/attnkit_lab/handlers.py, issue 51) against a hostile student.

One course for the module (``service_course.running_course``: real unix students, nbgrader's
exchange, ``attnkit serve`` grading each submit, two feedbacks per hour), two students who each
submitted once through ``nbgrader submit`` (the victim's page and marks are in the exchange), and the
attacker's own Jupyter server (``jupyter server`` of this venv, with the kit's server extension, run
as the attacker's unix user from their home, as a hub's spawner runs it). Every request goes to that
server over HTTP with its token, as the attacker's browser (or a script of theirs) would send it:

- odd keys and names (``..``, absolute paths, NUL, undecodable bytes, full-width digits, very long):
  refused (4xx), never a file outside the exchange's feedback folder, never a 500;
- a classmate's hash, a forged cache entry holding the classmate's secret, a fake exchange of the
  attacker's own (links to the classmate's page and to the hidden model answers, forged marks and
  policies): nothing of it shown, nothing marked;
- marks files that are not the kit's (not JSON, nested 100 000 deep, over the cap, fields of other
  types): not served; valid ones are served with the known fields only, texts as texts;
- ``submit``: paths that are not an assignment's notebook in the server's root refused (400); a
  folder configuration naming the classmate does not submit in their name; a flood starts one
  ``nbgrader submit`` at a time, the server answering meanwhile, and the service's limit holds.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import secrets
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from commands import start_tool, stop_group
from service_course import running_course
from ta_machine import lend_to_others
from test_nbgrader_exchange import LENT, clean_env
from test_service_exchange import ASSIGNMENT, BIN, MISTAKE, WAIT, Course, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.root]

ATTEMPTS = 2  # feedbacks per hour: the flood's limit


@dataclass
class Lab:
    course: Course
    attacker: str
    victim: str
    port: int
    token: str
    log: Path

    @property
    def home(self) -> Path:
        return self.course.home(self.attacker)

    @property
    def feedback(self) -> Path:
        return self.course.exchange / "ch19" / "feedback"

    @property
    def cache(self) -> Path:
        return self.home / ".local" / "share" / "jupyter" / "nbgrader_cache" / "ch19"

    def request(self, path: str, body: bytes | None = None, timeout: float = WAIT) -> tuple[int, bytes]:
        """``path`` (below the server's root URL, already quoted) with the token; (status, body)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/{path}", data=body, headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (http.client.RemoteDisconnected, ConnectionResetError) as error:  # a request line over the server's cap: closed
            return 0, str(error).encode()

    def get_json(self, path: str) -> dict:
        status, body = self.request(path)
        assert status == 200, (path, status, body[:2000], self.log.read_text()[-3000:])
        return dict(json.loads(body))

    def submit(self, path: object) -> tuple[int, bytes]:
        return self.request("attnkit-lab/submit", json.dumps({"path": path}).encode())

    def forge_cache_entry(self, secret: str, n: int, year: int = 2026) -> str:
        """A submission of the attacker's own cache (nbgrader's layout: it is theirs to write) whose
        secret is ``secret``, made in ``year``; the key the extension gives it ("ch19/<hash>")."""
        stamp = f"{year}-12-01 00:00:{n:02d}.000000 UTC"
        folder = self.cache / f"{self.attacker}+{ASSIGNMENT}+{stamp}"
        folder.mkdir(parents=True)
        (folder / "submission_secret.txt").write_text(secret)
        (folder / "timestamp.txt").write_text(stamp)
        (folder / "attention.ipynb").write_bytes(MISTAKE.read_bytes())
        for path in (self.cache, folder, *folder.iterdir()):
            shutil.chown(path, self.attacker, self.attacker)
        return f"ch19/{notebook_hash(secret)}"


def notebook_hash(secret: str) -> str:
    from nbgrader.utils import notebook_hash as nbgrader_hash

    return str(nbgrader_hash(secret=secret, notebook_id="attention"))


def secret_of(course: Course, user: str) -> str:
    """The secret of ``user``'s only real submission (their nbgrader cache, read by root)."""
    cache = course.home(user) / ".local" / "share" / "jupyter" / "nbgrader_cache" / "ch19"
    (secret,) = [p.read_text() for p in cache.glob(f"*+{ASSIGNMENT}+*/submission_secret.txt")]
    return secret


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    policy = {"attempts": ATTEMPTS, "window_hours": 1, "visibility": "full", "counts": "latest"}
    with running_course("ak51h", ("attacker", "victim"), datetime.timedelta(days=1), **policy) as course:
        attacker, victim = course.users["attacker"], course.users["victim"]  # type: ignore[attr-defined]
        hostile = course.base / "hostile.ipynb"
        hostile.write_text(json.dumps(hostile_notebook()))
        course.fetch(victim, course.submit(victim, MISTAKE))
        course.fetch(attacker, course.submit(attacker, hostile))
        home, port, token = course.home(attacker), free_port(), secrets.token_hex(16)
        log = course.base / "lab.log"
        environment = [f"{k}={v}" for k, v in clean_env(home).items()]
        command = [
            "runuser", "-u", attacker, "--", "env", "-i", *environment, str(BIN / "jupyter"), "lab", "--no-browser", "--LabApp.expose_app_in_browser=True",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home}",
        ]  # fmt: skip
        server = start_tool(lend_to_others(command, LENT), log=log, cwd=home)
        setup = Lab(course, attacker, victim, port, token, log)
        try:
            deadline = time.monotonic() + WAIT
            while True:
                try:
                    if setup.request("api/status", timeout=5)[0] == 200:
                        break
                except OSError:
                    pass
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            yield setup
        finally:
            stop_group(server)


# What the attacker's scaled_attention raises: the check's output (the marks' "said") carries it to their JupyterLab.
HOSTILE = '<img src=x onerror="window.attnkitHostile=1"><b id=attnkit-hostile>bold</b>'


def hostile_notebook() -> dict:
    """The model answers with ``scaled_attention`` redefined, in its own cell, to raise ``HOSTILE``."""
    from commands import ROOT

    notebook = json.loads((ROOT / "solutions" / ASSIGNMENT / "attention.ipynb").read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "def scaled_attention(" in source:
            cell["source"] = source + f"\n\n\ndef scaled_attention(*args, **kwargs):\n    raise ValueError({HOSTILE!r})\n"
            return dict(notebook)
    raise AssertionError("no scaled_attention cell")


@pytest.mark.browser
def test_marks_with_markup_in_them_are_shown_as_text(lab: Lab, tmp_path: Path) -> None:
    """The attacker's own graded submission, whose check output carries HTML: in their JupyterLab
    (headless Chromium) the scaled_attention cell is marked and shows the markup as text; no element
    of it is made, no handler of it runs."""
    from devtools import Browser
    from test_lab_feedback import wait_until

    browser = Browser(tmp_path / "profile", tmp_path / "chromium.log")
    try:
        browser.go(f"http://127.0.0.1:{lab.port}/lab/tree/{ASSIGNMENT}/attention.ipynb?token={lab.token}")
        said = wait_until(browser, "[...document.querySelectorAll('.attnkit-mark-check pre')].map(p => p.textContent).join('\\n')")
        assert HOSTILE in said, said
        assert browser.evaluate("document.querySelector('.attnkit-marked').dataset.attnkitFunction") == "scaled_attention"
        assert browser.evaluate("document.querySelectorAll('.attnkit-mark img, #attnkit-hostile').length") == 0
        assert browser.evaluate("window.attnkitHostile === undefined") is True
    finally:
        browser.close()


def refused(status: int) -> bool:
    """A refusal of the request: not found, bad, too long (or the connection closed on it); never
    served (200), never a crash (500)."""
    return status in (0, 400, 404, 414, 431)


def test_odd_keys_and_assignment_names_are_refused(lab: Lab) -> None:
    # A forged marks file in the attacker's home, and the way to it from the feedback folder: a key
    # that climbs out of the folder must not reach it.
    forged = lab.home / "forged.json"
    forged.write_text(json.dumps({"format": 1, "shown": "full", "functions": [], "labels": {}}))
    shutil.chown(forged, lab.attacker, lab.attacker)
    climb = os.path.relpath(lab.home / "forged", lab.feedback)
    keys = [
        f"ch19/{climb}",
        f"ch19%2f{urllib.request.quote(climb, safe='')}",
        "/etc/passwd",
        "ch19/../../../../../../etc/passwd",
        f"{urllib.request.quote(str(lab.home), safe='')}/forged",
        "ch19/%00" + "a" * 32,
        "ch19/" + "a" * 31 + "%00",
        "ch19/%ff%fe" + "a" * 30,
        "ch19/" + "%EF%BC%A1" * 32,  # full-width letters: alphanumeric to str.isalnum
        "ch19/" + "a" * 64,
        "ch19/" + "a" * 200_000,
        "%2e%2e/" + "a" * 32,
    ]
    for endpoint in ("page", "marks"):
        for channel in ("exchange", "hub"):
            for key in keys:
                status, body = lab.request(f"attnkit-lab/{endpoint}?channel={channel}&key={key}")
                assert refused(status), (endpoint, channel, key[:200], status, body[:500])
    for name in ["..", "../..", "%2Fetc", "ch19-attention%2F..%2F..", "-x", "--student=x", ".hidden", "%00", "%ff%fe", "a" * 300, "a\\b"]:
        status, body = lab.request(f"attnkit-lab/state?assignment={name}")
        assert status == 400, (name, status, body[:500])
    assert lab.get_json(f"attnkit-lab/state?assignment={ASSIGNMENT}")["channel"] == "exchange", "the server still answers"


def test_a_classmates_hash_a_forged_secret_and_links_show_nothing(lab: Lab) -> None:
    victim_key = f"ch19/{notebook_hash(secret_of(lab.course, lab.victim))}"
    assert (lab.feedback / f"{victim_key[5:]}.json").is_file(), "the victim's marks are there"
    for endpoint in ("page", "marks"):
        status, _body = lab.request(f"attnkit-lab/{endpoint}?channel=exchange&key={victim_key}")
        assert status == 404, (endpoint, status)
    # The victim's secret (as if overheard) in the attacker's own cache: listed, never ready, never shown.
    assert lab.forge_cache_entry(secret_of(lab.course, lab.victim), 1) == victim_key
    state = lab.get_json(f"attnkit-lab/state?assignment={ASSIGNMENT}")
    (listed,) = [s for s in state["submissions"] if s["key"] == victim_key]
    assert listed["ready"] is False, state
    for endpoint in ("page", "marks"):
        assert lab.request(f"attnkit-lab/{endpoint}?channel=exchange&key={victim_key}")[0] == 404

    # A fake exchange of the attacker's own, named in their own nbgrader_config.py: links to the
    # victim's page and marks and to the hidden model answers, forged marks, forged policies.
    fake = lab.home / "fake-exchange" / "ch19" / "feedback"
    fake.mkdir(parents=True)
    keys = [lab.forge_cache_entry(f"{n:0128x}", 10 + n) for n in range(4)]
    hidden = lab.course.root / "solutions" / ASSIGNMENT / "attention.ipynb"
    (fake / f"{keys[0][5:]}.html").symlink_to(lab.feedback / f"{victim_key[5:]}.html")
    (fake / f"{keys[0][5:]}.json").symlink_to(lab.feedback / f"{victim_key[5:]}.json")
    (fake / f"{keys[1][5:]}.html").symlink_to(hidden)
    (fake / f"{keys[1][5:]}.json").symlink_to(hidden)
    forged = {
        "format": 1,
        "shown": "full",
        "functions": [{"function": "scaled_attention", "score": 10, "max_score": 10, "full": True, "diagnoses": [], "first_failure": None}],
        "labels": {"full": "forged {score}"},
    }
    for key in keys[2:]:
        (fake / f"{key[5:]}.html").write_text("<p id=score>100 / 100</p>")
        (fake / f"{key[5:]}.json").write_text(json.dumps(forged))
    (fake / "attnkit-policies.json").write_text(json.dumps({"format": 1, "assignments": {ASSIGNMENT: {"attempts": 99, "window_seconds": 1}}}))
    for path in [lab.home / "fake-exchange", lab.home / "fake-exchange" / "ch19", fake, *fake.iterdir()]:
        os.chown(path, *owner(lab.attacker), follow_symlinks=False)
    config = lab.home / "nbgrader_config.py"
    before = config.read_text()
    try:
        config.write_text(before + f"c.Exchange.root = {str(lab.home / 'fake-exchange')!r}\n")
        state = lab.get_json(f"attnkit-lab/state?assignment={ASSIGNMENT}")
        assert not any(s["ready"] for s in state["submissions"]), state
        assert state["limit"] is None and state["channel"] == "none", "no forged policy, nothing to show"
        for key in keys:
            for endpoint in ("page", "marks"):
                status, body = lab.request(f"attnkit-lab/{endpoint}?channel=exchange&key={key}")
                assert status == 404, (key, endpoint, status, body[:300])
    finally:
        config.write_text(before)


def owner(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_marks_files_that_are_not_the_kits_are_not_served(lab: Lab) -> None:
    """Files the service could never write, placed where it writes (the student's own, 0600): the
    endpoint answers 404 for each, the state still answers; a valid one comes back with the known
    fields only and its texts as they are (the frontend puts them in with textContent)."""
    good = {
        "format": 1,
        "shown": "full",
        "score": 5,
        "max_score": 10,
        "functions": [
            {
                "function": "scaled_attention",
                "score": 5,
                "max_score": 10,
                "full": False,
                "diagnoses": [{"id": "x", "text": "<img src=x onerror=alert(1)>", "section": "<b>5</b>"}],
                "first_failure": {"check": "<script>alert(1)</script>", "said": "</pre><script>alert(2)</script>"},
                "html": "<script>alert(3)</script>",
            }
        ],
        "labels": {"full": "<i>{score}</i>"},
        "limit": {"attempts": 2, "window_seconds": 3600, "counted": [1.5]},
        "extra": {"innerHTML": "<script>"},
    }
    bad: list[bytes] = [
        b'{"format": 1, "functions": [], "labels": {}, "pad": "' + b"x" * (3 * 1024 * 1024) + b'"}',
        b"\xff\xfe\x00{",
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({**good, "functions": "scaled_attention"}).encode(),
        json.dumps({**good, "functions": [{**good["functions"][0], "score": "<b>10</b>"}]}).encode(),  # type: ignore[dict-item]
        json.dumps({**good, "functions": [{**good["functions"][0], "diagnoses": ["<b>"]}]}).encode(),  # type: ignore[dict-item]
        json.dumps({**good, "functions": [{**good["functions"][0], "full": "yes"}]}).encode(),  # type: ignore[dict-item]
        json.dumps({**good, "labels": ["full"]}).encode(),
        json.dumps({**good, "limit": {"attempts": "many", "window_seconds": 1, "counted": {}}}).encode(),
        json.dumps({**good, "format": 2}).encode(),
        json.dumps([good]).encode(),
        b"not json",  # the latest of them (the state reads it)
    ]
    # Made "later" than every real one: the state reads a bad one as the latest page's marks.
    keys = [lab.forge_cache_entry(f"{n + 100:0128x}", n, year=2099) for n in range(len(bad) + 1)]
    for key, data in zip(keys, [*bad, json.dumps(good).encode()], strict=True):
        for path, content in ((lab.feedback / f"{key[5:]}.json", data), (lab.feedback / f"{key[5:]}.html", b"<p>page</p>")):
            path.write_bytes(content)
            os.chown(path, *owner(lab.attacker))
            path.chmod(0o600)
    try:
        for key, data in zip(keys, bad, strict=False):
            status, body = lab.request(f"attnkit-lab/marks?channel=exchange&key={key}")
            assert status == 404, (data[:80], status, body[:300])
        status, body = lab.request(f"attnkit-lab/marks?channel=exchange&key={keys[-1]}")
        assert status == 200, body[:500]
        served = json.loads(body)
        mark = served["functions"][0]
        assert "extra" not in served and "html" not in mark
        assert mark["diagnoses"][0]["text"] == "<img src=x onerror=alert(1)>" and mark["first_failure"]["said"] == "</pre><script>alert(2)</script>"
        assert served["limit"] == {"attempts": 2, "window_seconds": 3600.0, "counted": [1.5]}
        # The state reads the latest ready page's marks for the limit: with a bad one latest, it still answers.
        (lab.feedback / f"{keys[-1][5:]}.html").unlink()
        state = lab.get_json(f"attnkit-lab/state?assignment={ASSIGNMENT}")
        assert [s["key"] for s in state["submissions"] if s["ready"]][-1] == keys[-2], state["submissions"][-3:]
    finally:
        for key in keys:
            for suffix in (".json", ".html"):
                (lab.feedback / f"{key[5:]}{suffix}").unlink(missing_ok=True)


def inbound_names(lab: Lab) -> set[str]:
    return set(os.listdir(lab.course.exchange / "ch19" / "inbound"))


def test_submit_refuses_paths_that_are_not_an_assignments_notebook(lab: Lab) -> None:
    victim_notebook = lab.course.home(lab.victim) / ASSIGNMENT / "attention.ipynb"
    (lab.home / "elsewhere.ipynb").symlink_to(victim_notebook)
    option = lab.home / f"--student={lab.victim}"
    option.mkdir()
    (option / "attention.ipynb").write_bytes(MISTAKE.read_bytes())
    (lab.home / "top.ipynb").write_bytes(MISTAKE.read_bytes())
    for path in (lab.home / "elsewhere.ipynb", option, option / "attention.ipynb", lab.home / "top.ipynb"):
        os.chown(path, *owner(lab.attacker), follow_symlinks=False)
    before = inbound_names(lab)
    paths: list[object] = [
        "../../etc/passwd",
        "/etc/passwd",
        str(victim_notebook),
        f"../{lab.victim}/{ASSIGNMENT}/attention.ipynb",
        "elsewhere.ipynb",
        "top.ipynb",
        f"--student={lab.victim}/attention.ipynb",
        f"{ASSIGNMENT}/attention\x00.ipynb",
        f"{ASSIGNMENT}/\udcff.ipynb",
        f"{ASSIGNMENT}/" + "a" * 5000 + ".ipynb",
        f"{ASSIGNMENT}/" + "a/" * 3000 + "attention.ipynb",
        f"{ASSIGNMENT}",
        "",
        123,
        [f"{ASSIGNMENT}/attention.ipynb"],
        None,
    ]
    for path in paths:
        status, body = lab.submit(path)
        assert status == 400, (repr(path)[:200], status, body[:500])
    for body in (b"not json", b'"a string"', b"[1]"):
        assert lab.request("attnkit-lab/submit", body)[0] == 400, body
    assert inbound_names(lab) == before, "nothing submitted"


def test_submit_is_in_the_students_own_name(lab: Lab) -> None:
    """A folder whose nbgrader_config.py names the classmate (``CourseDirectory.student_id``):
    the endpoint's submit is still the attacker's own, graded as theirs; the classmate's attempts untouched."""
    sneaky = lab.home / "sneaky"
    (sneaky / ASSIGNMENT).mkdir(parents=True)
    (sneaky / ASSIGNMENT / "attention.ipynb").write_bytes(MISTAKE.read_bytes())
    (sneaky / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.Exchange.root = {str(lab.course.exchange)!r}\nc.CourseDirectory.course_id = 'ch19'\n"
        f"c.CourseDirectory.student_id = {lab.victim!r}\n"
    )
    for path in (sneaky, sneaky / ASSIGNMENT, sneaky / ASSIGNMENT / "attention.ipynb", sneaky / "nbgrader_config.py"):
        os.chown(path, *owner(lab.attacker))
    with lab.course.db() as db:
        victims_before = db.execute("SELECT COUNT(*) FROM submissions WHERE student = ?", (lab.victim,)).fetchone()[0]
    before = inbound_names(lab)
    status, body = lab.submit(f"sneaky/{ASSIGNMENT}/attention.ipynb")
    assert status == 200 and json.loads(body)["success"], body[:2000]
    (new,) = inbound_names(lab) - before
    assert new.startswith(f"{lab.attacker}+{ASSIGNMENT}+"), new
    deadline = time.monotonic() + WAIT
    while True:
        with lab.course.db() as db:
            row = db.execute("SELECT student, state FROM submissions WHERE inbound = ?", (new,)).fetchone()
            victims = db.execute("SELECT COUNT(*) FROM submissions WHERE student = ?", (lab.victim,)).fetchone()[0]
        if row is not None and row["state"] == "delivered":
            break
        assert time.monotonic() < deadline, lab.course.log.read_text()[-3000:]
        time.sleep(0.2)
    assert row["student"] == lab.attacker and victims == victims_before


def submit_processes(user: str) -> list[int]:
    """The ``nbgrader submit`` processes running as ``user`` now."""
    import pwd

    uid = pwd.getpwnam(user).pw_uid
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"nbgrader" in argv and b"submit" in argv:
                    found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_a_flood_of_submits_runs_one_at_a_time_and_the_limit_holds(lab: Lab) -> None:
    before = inbound_names(lab)
    answers: list[int] = []
    peak = 0
    answered_while_running: list[bool] = []

    def one() -> None:
        answers.append(lab.submit(f"{ASSIGNMENT}/attention.ipynb")[0])

    flood = [threading.Thread(target=one) for _ in range(12)]
    for thread in flood:
        thread.start()
    while any(thread.is_alive() for thread in flood):
        running = submit_processes(lab.attacker)
        peak = max(peak, len(running))
        if running and not answered_while_running:
            # The server answers while a submit runs (it is not held up by it).
            status = lab.request("api/status")[0]
            answered_while_running.append(status == 200 and Path(f"/proc/{running[0]}").exists())
        time.sleep(0.01)
    assert peak == 1, f"{peak} nbgrader submit at once"
    assert set(answers) <= {200, 429} and 200 in answers, answers
    assert answered_while_running == [True], "the server waited for the submit to end"
    made = inbound_names(lab) - before
    assert len(made) == answers.count(200)
    # The service's own limit: at most ATTEMPTS graded pages in the hour (one was the fixture's).
    deadline = time.monotonic() + WAIT
    while True:
        with lab.course.db() as db:
            rows = db.execute("SELECT state, shown FROM submissions WHERE student = ?", (lab.attacker,)).fetchall()
        if all(row["state"] == "delivered" for row in rows) and len(rows) >= 1 + len(made):
            break
        assert time.monotonic() < deadline, lab.course.log.read_text()[-3000:]
        time.sleep(0.2)
    assert sum(row["shown"] == "full" for row in rows) <= ATTEMPTS, [dict(r) for r in rows]

"""Issue 48: ``attnkit serve --hub``'s HTTP side survives its students (docs/hub.md).

One real JupyterHub for the module (``test_service_hub.running``: PyPI's jupyterhub, npm's
configurable-http-proxy, DummyAuthenticator, which lets a user log in under any allowed name) with
a course that maps hub names to student ids (``c.AttnkitServe.hub_students``): students A, B and
``ak48m…@example.edu`` are mapped; a user who registered as the mapped student's id (the
*squatter*), a user nobody mapped and the TA (unmapped) are not.

- Bodies: sixty-megabyte POSTs, without a user, with a forged one, with the squatter's or the
  unmapped user's valid token, over the cap with a student's valid token (by Content-Length, and
  chunked without one), to a route that takes no body: each refused, and the hub side's resident
  memory (/proc) grows by less than ``RSS_BOUND``; asked with ``Expect: 100-continue``, the service
  refuses on the headers alone (it never asks for the body). Then B's submission still goes.
- Identity: the squatter cannot read or submit as the mapped student; the unmapped user is
  refused (the TA must map them); the TA still sees the class; a mapping that gives one id to two
  hub names stops the hub side at its start, naming both.
- Other inputs: a form with too many fields, an assignment name of kilobytes with control
  characters (not said back), the client's notebook over the cap or not a regular file.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import select
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from commands import BIN, ROOT, run_command, tool_env
from test_service_hub import ASSIGNMENT, CORRECT, MISTAKE, SERVICE, TA_GROUP, WAIT, Hub, free_port, multipart, request, running

MB = 1024 * 1024
ATTACK_BYTES = 60 * MB  # each POST's body
OVER_CAP_BYTES = 70 * MB  # over http_submit.MAX_BODY_BYTES (65 MiB)
RSS_BOUND = 64 * MB  # what eight such POSTs at once may add to the hub side's resident memory, at its peak


class AttackedHub(Hub):
    """The course maps A, B and one e-mail-like hub name; three more users are not mapped."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        suffix = f"{os.getpid() % 100000}"
        self.mapped = f"ak48m{suffix}@example.edu"
        self.ids = {self.mapped: f"s48x{suffix}1", self.a: f"s48x{suffix}2", self.b: f"s48x{suffix}3"}
        self.squatter = self.ids[self.mapped]  # registered under the mapped student's id
        self.unmapped = f"ak48u{suffix}"

    def users(self) -> list[str]:
        return [*super().users(), self.mapped, self.squatter, self.unmapped]

    def course_config(self) -> str:
        return f"c.AttnkitServe.hub_ta_groups = [{TA_GROUP!r}]\nc.AttnkitServe.hub_students = {self.ids!r}\n"


@pytest.fixture(scope="module")
def hub() -> Iterator[AttackedHub]:
    with running(AttackedHub) as setup:
        yield setup


def hub_side(hub: Hub) -> int:
    """The pid of the service's HTTP process (``python -m attnkit.service.hub COURSE …``, run from /)
    that this module's hub started: the one whose course is under the hub's folder."""
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"attnkit.service.hub" in words and any(Path(os.fsdecode(word)).is_relative_to(hub.base) for word in words if word.startswith(b"/")):
            return int(entry.name)
    raise AssertionError("no attnkit.service.hub process under the hub")


def memory(pid: int) -> dict[str, int]:
    """``pid``'s resident memory now (VmRSS) and at its peak (VmHWM), in bytes (/proc/PID/status)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def reset_peak(pid: int) -> None:
    """Start ``pid``'s VmHWM again from its VmRSS now (proc(5): clear_refs, 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def head(hub: Hub, path: str, headers: dict[str, str], length: int | None) -> bytes:
    lines = [f"POST /services/{SERVICE}/{path} HTTP/1.1", f"Host: 127.0.0.1:{hub.service_port}"]
    lines.append("Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}")
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def status_of(sock: socket.socket) -> tuple[int, bytes]:
    """The first answer's status and its head and body (up to 4 kB); 0 when the connection closed without one."""
    answer = b""
    try:
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
        header, _, body = answer.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
        while len(body) < min(length, 4096):
            data = sock.recv(65536)
            if not data:
                break
            body += data
            answer += data
    except (ConnectionResetError, TimeoutError):
        pass
    parts = answer.split(b" ", 2)
    return (int(parts[1]) if answer.startswith(b"HTTP/1.1 ") and len(parts) > 1 else 0), answer


def blind_post(hub: Hub, path: str, headers: dict[str, str], size: int, declared: int | None = -1) -> tuple[int, bytes, int]:
    """POST ``size`` bytes as an attacker does: the body right after the headers, never waiting to
    be asked; stopped only when the service has answered or closed. ``declared``: the
    Content-Length (the size when -1, chunked when None). (status, answer, bytes sent)."""
    piece = b"x" * MB
    sent = 0
    with socket.create_connection(("127.0.0.1", hub.service_port), timeout=120) as sock:
        sock.sendall(head(hub, path, headers, size if declared == -1 else declared))
        try:
            while sent < size and not select.select([sock], [], [], 0)[0]:
                sock.sendall(piece if declared is not None else b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
            if declared is None and sent >= size:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        status, answer = status_of(sock)
    return status, answer, sent


def first_answer(hub: Hub, path: str, headers: dict[str, str], length: int) -> tuple[int, bytes]:
    """What the service answers a POST's headers with ``Expect: 100-continue``: 100 would ask for the body."""
    with socket.create_connection(("127.0.0.1", hub.service_port), timeout=120) as sock:
        sock.sendall(head(hub, path, {**headers, "Expect": "100-continue"}, length))
        return status_of(sock)


def token(hub: Hub, user: str) -> dict[str, str]:
    return {"Authorization": f"token {hub.token(user)}"}


def submit(hub: AttackedHub, user: str, notebook: Path) -> dict:
    """``user``'s submission over the API, once the service has queued it (202)."""
    status, answer = request(f"{hub.service}api/submit/{ASSIGNMENT}", token=hub.token(user), data=notebook.read_bytes(), method="POST")
    assert status == 202, (status, answer[:500])
    made: dict = json.loads(answer)
    assert made["id"] is not None
    return made


def rows_of(hub: Hub, student: str) -> list[sqlite3.Row]:
    with hub.db() as db:
        return db.execute("SELECT * FROM submissions WHERE student = ? ORDER BY id", (student,)).fetchall()


@pytest.mark.e2e
@pytest.mark.root
def test_a_body_is_refused_on_its_headers_before_the_service_asks_for_it(hub: AttackedHub) -> None:
    """``Expect: 100-continue``: the refusal comes instead of the ``100 Continue`` that would ask for the body."""
    form = {"Content-Type": "multipart/form-data; boundary=x"}
    cases = [
        ("no user", f"api/submit/{ASSIGNMENT}", {}, ATTACK_BYTES, 403),
        ("no user, the form", "submit", form, ATTACK_BYTES, 403),
        ("the squatter's token", f"api/submit/{ASSIGNMENT}", token(hub, hub.squatter), ATTACK_BYTES, 403),
        ("an unmapped user's token", f"api/submit/{ASSIGNMENT}", token(hub, hub.unmapped), ATTACK_BYTES, 403),
        ("a student's token, over the cap", f"api/submit/{ASSIGNMENT}", token(hub, hub.a), OVER_CAP_BYTES, 413),
        ("a student's token, no such assignment", "api/submit/no-such-assignment", token(hub, hub.a), ATTACK_BYTES, 400),
    ]
    for what, path, headers, length, expected in cases:
        status, answer = first_answer(hub, path, headers, length)
        assert status == expected, (what, answer[:300])
    status, answer = first_answer(hub, f"api/submit/{ASSIGNMENT}", token(hub, hub.a), OVER_CAP_BYTES)
    assert "MB" in answer.decode("utf-8", "replace"), "413 says why (the cap)"


@pytest.mark.e2e
@pytest.mark.root
def test_eight_60_mb_posts_leave_the_hub_sides_memory_flat_and_b_still_submits(hub: AttackedHub) -> None:
    pid = hub_side(hub)
    forged = {"X-Forwarded-User": hub.a, "Cookie": f"jupyterhub-services=forged; jupyterhub-user={hub.a}"}
    form = {"Content-Type": "multipart/form-data; boundary=x"}
    attacks = [
        ("no user", f"api/submit/{ASSIGNMENT}", {}, ATTACK_BYTES, -1, {403}),
        ("no user, the form", "submit", form, ATTACK_BYTES, -1, {403}),
        ("a forged user", f"api/submit/{ASSIGNMENT}", forged, ATTACK_BYTES, -1, {403}),
        ("the squatter's token", f"api/submit/{ASSIGNMENT}", token(hub, hub.squatter), ATTACK_BYTES, -1, {403}),
        ("an unmapped user's token", f"api/submit/{ASSIGNMENT}", token(hub, hub.unmapped), ATTACK_BYTES, -1, {403}),
        ("a route that takes no body", "", {}, ATTACK_BYTES, -1, {400, 413}),
        ("a student's token, 70 MB declared", f"api/submit/{ASSIGNMENT}", token(hub, hub.a), ATTACK_BYTES, OVER_CAP_BYTES, {413}),
        ("a student's token, 70 MB chunked", f"api/submit/{ASSIGNMENT}", token(hub, hub.a), OVER_CAP_BYTES, None, {413}),
    ]
    reset_peak(pid)
    before = memory(pid)
    # All eight at once, as the attack came: what matters is what the process holds while they last.
    with concurrent.futures.ThreadPoolExecutor(len(attacks)) as pool:
        posts = {what: pool.submit(blind_post, hub, path, headers, size, declared) for what, path, headers, size, declared, _expected in attacks}
        answers = {what: post.result() for what, post in posts.items()}
    time.sleep(1.0)  # the closed connections' buffers go (no timing is asserted: the bound is on memory)
    after = memory(pid)
    assert hub_side(hub) == pid, "the hub side is the same process (it did not die and restart)"
    sent = ", ".join(f"{what}: {answer[2] // MB}" for what, answer in answers.items())
    print(
        f"\nhub side: VmRSS {before['VmRSS'] / MB:.1f} MiB before, peak (VmHWM) {after['VmHWM'] / MB:.1f} MiB during, "
        f"VmRSS {after['VmRSS'] / MB:.1f} MiB after eight concurrent POSTs; MiB sent: {sent}"
    )
    assert after["VmHWM"] - before["VmRSS"] < RSS_BOUND, f"peak {before['VmRSS'] / MB:.1f} -> {after['VmHWM'] / MB:.1f} MiB"
    assert after["VmRSS"] - before["VmRSS"] < RSS_BOUND
    for what, _path, _headers, _size, _declared, expected in attacks:
        assert answers[what][0] in expected, (what, answers[what][:2])

    made = submit(hub, hub.b, CORRECT)
    assert made["student"] == hub.ids[hub.b]
    deadline = time.monotonic() + WAIT
    while json.loads(request(f"{hub.service}api/attempts/{made['id']}", token=hub.token(hub.b))[1])["state"] != "delivered":
        assert time.monotonic() < deadline
        time.sleep(0.5)


@pytest.mark.e2e
@pytest.mark.root
def test_a_hub_name_equal_to_another_students_mapped_id_is_refused(hub: AttackedHub) -> None:
    made = submit(hub, hub.mapped, MISTAKE)
    assert made["student"] == hub.ids[hub.mapped]
    theirs = f"{hub.service}api/attempts/{made['id']}"
    assert request(theirs, token=hub.token(hub.mapped))[0] == 200
    for url in (f"{hub.service}api/attempts", theirs, f"{hub.service}attempt/{made['id']}/feedback", hub.service):
        status, body = request(url, token=hub.token(hub.squatter))
        assert status == 403, (url, body[:300])
        assert hub.ids[hub.mapped].encode() in body and b"hub_students" in body, body[:300]  # says why
        assert f'"id": {made["id"]}'.encode() not in body
    status, body = request(f"{hub.service}api/submit/{ASSIGNMENT}", token=hub.token(hub.squatter), data=MISTAKE.read_bytes(), method="POST")
    assert status == 403 and b"hub_students" in body
    # The mapped student's record holds their own submission only.
    assert [row["id"] for row in rows_of(hub, hub.ids[hub.mapped])] == [made["id"]]


@pytest.mark.e2e
@pytest.mark.root
def test_an_unmapped_student_is_refused_and_the_ta_is_not(hub: AttackedHub) -> None:
    status, body = request(f"{hub.service}api/attempts", token=hub.token(hub.unmapped))
    assert status == 403 and hub.unmapped.encode() in body and b"hub_students" in body, body[:300]
    attempts = len(list((hub.course / ".attnkit-serve" / "attempts").iterdir())) if (hub.course / ".attnkit-serve" / "attempts").is_dir() else 0
    status, body = request(f"{hub.service}api/submit/{ASSIGNMENT}", token=hub.token(hub.unmapped), data=MISTAKE.read_bytes(), method="POST")
    assert status == 403
    assert not rows_of(hub, hub.unmapped)
    now = len(list((hub.course / ".attnkit-serve" / "attempts").iterdir())) if (hub.course / ".attnkit-serve" / "attempts").is_dir() else 0
    assert now == attempts, "nothing spooled"
    # The TA (not mapped) keeps working: the class, any student's submission, their own page.
    made = submit(hub, hub.a, MISTAKE)
    assert made["student"] == hub.ids[hub.a]
    status, answer = request(f"{hub.service}api/class", token=hub.token(hub.ta))
    assert status == 200 and made["id"] in [s["id"] for s in json.loads(answer)["latest"]]
    assert request(f"{hub.service}api/attempts/{made['id']}", token=hub.token(hub.ta))[0] == 200
    assert request(f"{hub.service}api/attempts", token=hub.token(hub.ta))[0] == 200


@pytest.mark.e2e
@pytest.mark.root
def test_the_forms_fields_and_an_assignments_name_are_capped(hub: AttackedHub) -> None:
    fields = {"assignment": ASSIGNMENT, **{f"f{n}": "x" for n in range(40)}}
    body, kind = multipart(fields, MISTAKE.read_bytes())
    status, answer = request(f"{hub.service}submit", token=hub.token(hub.a), data=body, method="POST", headers={"Content-Type": kind})
    assert status == 400, answer[:300]
    named = "ch19" + "\x1b[2J" * 500  # kilobytes of a terminal's escape codes
    status, answer = request(f"{hub.service}api/submit/{urllib.parse.quote(named)}", token=hub.token(hub.a), data=MISTAKE.read_bytes(), method="POST")
    assert status in (400, 404) and b"\x1b" not in answer and len(answer) < 1000, answer[:300]


@pytest.mark.e2e
@pytest.mark.root
def test_one_body_at_a_time_per_student(hub: AttackedHub) -> None:
    """While A's body is coming in, A's next POST is refused on its headers (429); once it has ended, A submits."""
    with socket.create_connection(("127.0.0.1", hub.service_port), timeout=120) as held:
        held.sendall(head(hub, f"api/submit/{ASSIGNMENT}", token(hub, hub.a), None) + b"%x\r\n%s\r\n" % (MB, b"x" * MB))
        incoming = hub.course / ".attnkit-serve" / ".incoming"
        deadline = time.monotonic() + WAIT
        while not (incoming.is_dir() and any(incoming.iterdir())):  # its body's file: it is coming in
            assert time.monotonic() < deadline and not select.select([held], [], [], 0)[0], "the held upload was answered"
            time.sleep(0.1)
        status, answer = first_answer(hub, f"api/submit/{ASSIGNMENT}", token(hub, hub.a), 1000)
        assert status == 429 and "上传".encode() in answer, answer[:300]
        assert first_answer(hub, f"api/submit/{ASSIGNMENT}", token(hub, hub.b), 1000)[0] == 100  # B is not held up
    deadline = time.monotonic() + WAIT
    while first_answer(hub, f"api/submit/{ASSIGNMENT}", token(hub, hub.a), 1000)[0] == 429:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert submit(hub, hub.a, MISTAKE)["student"] == hub.ids[hub.a]


@pytest.mark.root
def test_one_student_id_mapped_from_two_hub_names_stops_the_start(tmp_path: Path) -> None:
    """The hub side exits 2 at its start, once it has read the course (the service then stops: ``start_hub``), naming both hub names."""
    course = tmp_path / "course"
    course.mkdir()
    mapping = {"ana@example.edu": "s2026001", "bo@example.edu": "s2026002", "ana2@example.edu": "s2026001"}
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.AttnkitServe.hub_students = {mapping!r}\n")
    (tmp_path / "state").mkdir()
    env = tool_env(JUPYTERHUB_SERVICE_URL=f"http://127.0.0.1:{free_port()}", JUPYTERHUB_SERVICE_PREFIX="/services/attnkit/", JUPYTERHUB_API_TOKEN="x")
    done = run_command(
        [BIN / "python", "-m", "attnkit.service.hub", course, ROOT / "autograder", tmp_path / "state", tmp_path / "feedback", str(os.getpid())],
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    # It listens first (issue 49: JupyterHub waits for its port), then reads the course and stops.
    *before, event = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [e["event"] for e in before] in ([], ["hub-listening"])
    assert event["event"] == "hub-failed" and "ana@example.edu" in event["cause"] and "ana2@example.edu" in event["cause"] and "s2026001" in event["cause"]


def test_the_rule_a_mapping_makes() -> None:
    """With hub_students set, only mapped names are students; a mapped id is nobody else's name; a TA keeps theirs."""
    from attnkit.service.http_submit import Refused, hub_students, student_id

    mapping = {"ana@example.edu": "s2026001"}
    assert student_id("ana@example.edu", mapping) == "s2026001"
    for name, ta in (("s2026001", False), ("s2026001", True), ("bo", False)):
        with pytest.raises(Refused):
            student_id(name, mapping, ta=ta)
    assert student_id("ta1", mapping, ta=True) == "ta1"
    assert student_id("bo") == "bo"  # no mapping: the name itself
    with pytest.raises(Refused, match="ana@example.edu.*ana2@example.edu"):
        hub_students({"ana@example.edu": "s1", "ana2@example.edu": "s1"})
    with pytest.raises(Refused):
        hub_students({"ana@example.edu": "s1+x"})
    assert hub_students({}) == {} and hub_students(mapping) == mapping


@pytest.mark.parametrize("name", ["学" * 34, "ana\u202eexe", "a\u200db", "a b", "a\u3000b", "\udcff"])
def test_a_student_id_is_checked_as_the_bytes_it_becomes(name: str) -> None:
    """Over 100 bytes of UTF-8 (34 CJK characters are 102), a format character, a space, a lone surrogate."""
    from attnkit.service.http_submit import Refused, student_id

    with pytest.raises(Refused):
        student_id(name)


def test_the_client_refuses_a_notebook_over_the_cap_or_not_a_file_before_reading_it(tmp_path: Path) -> None:
    from attnkit.submitted_files import MAX_SUBMITTED_BYTES
    from attnkit.service.http_submit import Refused, read_notebook

    large = tmp_path / "large.ipynb"
    with open(large, "wb") as handle:
        handle.truncate(MAX_SUBMITTED_BYTES + 1)  # sparse: nothing to read, only its size
    with pytest.raises(Refused):
        read_notebook(large)
    pipe = tmp_path / "pipe.ipynb"
    os.mkfifo(pipe)
    writer = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)  # a reader's open would not block, nor its read end
    try:
        with pytest.raises(Refused):
            read_notebook(pipe)
    finally:
        os.close(writer)
    fine = tmp_path / "fine.ipynb"
    fine.write_bytes(b"{}")
    assert read_notebook(fine) == b"{}"


def test_the_form_is_read_from_its_file_parts_counted_first(tmp_path: Path) -> None:
    """``read_form``: the fields, and where the notebook lies, found a window at a time (a
    delimiter across two windows too); more parts than allowed refused before any is parsed."""
    from attnkit.service.http_submit import Refused, read_form

    path = tmp_path / "body"
    before = multipart({"_xsrf": "t0k", "assignment": ASSIGNMENT}, b"\0")[0].index(b"\0")  # the bytes before the notebook
    # The delimiter after the notebook at each place around the third window's end (read in 1 MiB).
    for shift in range(-48, 8):
        notebook = b"{" + b"n" * (3 * 1024 * 1024 - before - 2 + shift) + b"}"
        body, kind = multipart({"_xsrf": "t0k", "assignment": ASSIGNMENT}, notebook)
        path.write_bytes(body)
        fields, where = read_form(path, kind, 8)
        assert fields == {"_xsrf": b"t0k", "assignment": ASSIGNMENT.encode()}
        assert where is not None and body[where[0] : where[1]] == notebook, shift
    many, kind = multipart({f"f{n}": "x" for n in range(20)}, b"{}")
    path.write_bytes(many)
    with pytest.raises(Refused):
        read_form(path, kind, 8)
    assert read_form(path, "application/x-www-form-urlencoded", 8) == ({}, None)

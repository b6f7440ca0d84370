"""``attnkit serve``: grade each submission as it arrives in nbgrader's exchange (docs/service.md).

The on-submit service, the top layer below the command line: it may use every layer under it
(intake's caps, the engine's warm workers, the report's pages, the course's gradebook) and
nothing below imports it.

- ``queue``: the service's database, one interface (``queue.base.Queue``: the table, its schema
  and every query) over SQLite (``queue.sqlite``, the default: WAL, in the course) and PostgreSQL
  (``queue.postgres``: replicas on several machines, leases, ``SELECT … FOR UPDATE SKIP LOCKED``,
  one recorder at a time): each submission's state (queued -> grading -> delivered | failed;
  refused), one in flight per student, turns between students, what a restart finds after a crash.
- ``exchange``: nbgrader's exchange: a finished folder in ``inbound/``, whose it is (the uid
  owning it, never its name), the copy graded, and the feedback placed where ``nbgrader
  fetch_feedback`` looks (nbgrader's own ``notebook_hash`` of the submission's secret).
- ``pool``: the engine's warm workers fed one submission at a time.
- ``policies``: attempts per window, visibility, which attempt counts.
- ``recorder``: the gradebook records, in batches, in a process of their own (off the path of
  the feedback).
- ``serve``: the loop and the log line per submission, tying one module per job together:
  ``inbound`` (the way in), ``delivery`` (a record to its page), ``faults`` (stop or pause),
  ``warm_up``, ``retention``, ``due_dates``, ``course_lock``, ``recorder_process`` and
  ``hub_process`` (the child processes), ``metrics`` and ``metrics_endpoint`` (``/metrics``,
  ``/health``); ``status`` is ``--status``.
- ``hub`` (``--hub``): the HTTP side inside JupyterHub, a process of its own: students' pages, the
  TA's class, submit over HTTP and ``/health``, users known through the hub's OAuth only.
- ``http_submit``: a notebook posted to ``hub`` kept as the service's copy with a notice the loop
  queues (``hub`` never writes the database); the ``attnkit submit`` client.
"""

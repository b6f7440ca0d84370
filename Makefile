# attnkit — every target installs what it needs into .venv on first use.
# PYTHON given (on the command line or in the environment) is a choice: it is checked against the
# Python that made .venv. Not given, .venv is used as it is, whichever Python made it.
PYTHON_GIVEN := $(filter command line environment environment override,$(origin PYTHON))
PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
SUBMITTED ?= examples/submitted
OUT      ?= graded
# The demo class never lands in a course's gradebook: unless GRADEBOOK is given, grading the
# default demo class records into a throwaway demo gradebook inside OUT.
ifeq ($(origin GRADEBOOK),undefined)
  ifeq ($(SUBMITTED),examples/submitted)
    GRADEBOOK := $(OUT)/demo-gradebook.db
  else
    GRADEBOOK := gradebook.db
  endif
endif
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
ASSIGNMENT := ch19-attention
# nbgrader's Gradebook runs `alembic`, which must be on PATH.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help install lab collect lock browser slurm postgresql acl hub-proxy labextension labextension-build grade test test-fast test-second-assignment lint release check student-zip student-wheels student-env bench bench-serve serve gradescope clean

help:
	@echo "make grade [SUBMITTED=dir OUT=dir JOBS=n]  grade a class (default: the demo class)"
	@echo "make collect DOWNLOAD=file.zip [INTO=dir]   an LMS download (Canvas, Moodle, Blackboard) into submitted/<id>/<assignment>/"
	@echo "make test                                   lint (ruff, mypy), then run the whole test suite"
	@echo "make test-fast                              the suite without slow, e2e and browser tests (the inner loop)"
	@echo "make test-second-assignment                 the fast tests with a second assignment in the project (make test runs it too)"
	@echo "make lint                                   ruff, then mypy"
	@echo "make release                                regenerate assignments/ from solutions/"
	@echo "make install [PYTHON=python3.12]            create .venv and install the pinned dependencies (says what it downloads)"
	@echo "make lab                                    copy the notebook to mywork/ (once) and open it in JupyterLab"
	@echo "make check NB=path/to/attention.ipynb       grade one notebook with the hidden suite; the page stays in checked/"
	@echo "make venv-rebuild PYTHON=python3.12         remove .venv (saying what it removes) and install again with PYTHON"
	@echo "make student-zip                            build dist/ch19-attention-student.zip"
	@echo "make student-wheels                         build dist/student/: what a student's environment installs (docs/student-environment.md)"
	@echo "make student-env STUDENT_VENV=/opt/ch19-student   make that environment here (a hub whose students are users of this host)"
	@echo "make bench                                  benchmark against nbgrader autograde"
	@echo "make serve [METRICS_PORT=9339]              grade each nbgrader submit as it arrives (docs/service.md)"
	@echo "make bench-serve                            time attnkit serve: one submission, a deadline burst, then one student's flood (root)"
	@echo "make lock                                   regenerate requirements.lock (uv, one lock for Python 3.11-3.13)"
	@echo "make labextension                       install the kit's JupyterLab extension (labextension/, prebuilt) into .venv"
	@echo "make labextension-build                 rebuild it from labextension/src (npm ci, then JupyterLab's builder)"
	@echo "make gradescope                             build dist/gradescope.zip (a Gradescope autograder; one per assignment, dist/gradescope-NAME.zip, when there are several)"

install: $(STAMP)

# Nothing here removes a working .venv as a side effect. A .venv made by another Python:
# - PYTHON not given: used as it is (the Quick start's `make grade PYTHON=python3.12`, then a plain
#   `make check`, keeps the 3.12 environment);
# - PYTHON given, and the .venv holds a finished install: make stops, saying so; `make venv-rebuild
#   PYTHON=...` replaces it, saying what it removes;
# - PYTHON given, and the .venv holds no finished install (an install refused by requires-python, say):
#   it is removed, saying so, and made again with PYTHON (nothing in it worked).
ifneq ($(PYTHON_GIVEN),)
VENV_MISMATCH := $(shell $(PYTHON) tools/venv_mismatch.py $(VENV) 2>/dev/null)
endif
VENV_FINISHED := $(wildcard $(STAMP) $(VENV)/lib/python3*/site-packages/torch)
ifneq ($(VENV_MISMATCH),)
ifneq ($(VENV_FINISHED),)
$(STAMP): venv-kept
.PHONY: venv-kept
venv-kept:
	@echo "$(VENV_MISMATCH)."
	@echo "$(VENV) holds a finished install ($$(du -sh $(VENV) 2>/dev/null | cut -f1)); it is kept, nothing was changed."
	@echo "  to go on with it:       run make without PYTHON"
	@echo "  to replace it:          make venv-rebuild PYTHON=$(PYTHON)   (removes $(VENV), then installs again: minutes)"
	@echo "  to keep both:           work in another clone or git worktree for the other Python"
	@exit 2
else
$(STAMP): venv-unfinished
.PHONY: venv-unfinished
venv-unfinished:
	@echo "$(VENV_MISMATCH); $(VENV) holds no finished install (no $(STAMP), no torch): rebuilding $(VENV) with PYTHON=$(PYTHON) (removing the unfinished one)"
	rm -rf $(VENV)
endif
endif

# The explicit way to replace .venv (with PYTHON, default python3): says what it removes first.
.PHONY: venv-rebuild
venv-rebuild:
	@if [ -e $(VENV) ]; then echo "removing $(VENV) ($$(du -sh $(VENV) 2>/dev/null | cut -f1), made by $$(sed -n 's/^version *= *//p; s/^version_info *= *//p' $(VENV)/pyvenv.cfg 2>/dev/null | head -1 | sed 's/^/Python /')), to make it again with PYTHON=$(PYTHON)"; fi
	rm -rf $(VENV)
	$(MAKE) --no-print-directory install PYTHON=$(PYTHON)

# The install says what it downloads and how big (tools/install_plan.py), then shows pip's own
# progress: minutes of silence read as a hang.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python tools/install_plan.py
	$(BIN)/pip install --disable-pip-version-check --progress-bar on -c requirements.lock -e .
	touch $(STAMP)
	@echo "installed: $(VENV) ($$(du -sh $(VENV) 2>/dev/null | cut -f1))"

# requirements.lock is one universal lock for every supported Python (3.11-3.13) and platform, its
# platform- and version-specific pins behind environment markers that pip's -c understands.
# Regenerate it after changing pyproject.toml's dependencies (uv keeps the pins already in it;
# add --upgrade to move them). uv is only needed here, never to install.
UV_VERSION := 0.13.9
lock: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip compile --quiet --universal --python-version 3.11 pyproject.toml --extra dev -o requirements.lock

# The developer tools `make lint` and `make test` need beyond the grader's own (ruff, mypy).
DEV_STAMP := $(VENV)/.dev-installed
$(DEV_STAMP): $(STAMP)
	@echo "installing make lint's tools (ruff, mypy: some 60 MB, under a minute)"
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]"
	touch $(DEV_STAMP)

# ruff, then mypy (its files and strictness are pyproject's [tool.mypy]).
lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests tools autograder examples labextension/attnkit_lab
	$(BIN)/mypy

# The feedback-page test looks at the page in a real browser: Debian's Chromium and CJK fonts.
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and fonts-noto-cjk (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; \
	  else echo "please install chromium and fonts-noto-cjk (needed by tests/report/test_feedback_browser.py)"; fi; \
	fi

# The Slurm test (tests/engine/test_slurm.py) starts a single-host cluster of its own: Debian's
# slurm-wlm (slurmctld, slurmd, sbatch) and munge.
slurm:
	@if ! command -v sbatch >/dev/null 2>&1 || ! test -x /usr/sbin/slurmctld || ! test -x /usr/sbin/munged; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing slurm-wlm and munge (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
	  else echo "please install slurm-wlm and munge (needed by tests/engine/test_slurm.py)"; fi; \
	fi

# The replicas test (tests/service/test_service_replicas.py) starts a PostgreSQL server of its own
# (initdb, pg_ctl as an unprivileged user, on a free port of 127.0.0.1): Debian's postgresql.
# A page placed by a service without root is its student's by a POSIX ACL (setfacl): Debian's acl.
acl:
	@if ! command -v setfacl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing acl (Debian package: setfacl)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq acl >/dev/null; \
	  else echo "please install acl (setfacl; needed by tests/course/test_course_secure.py)"; fi; \
	fi

postgresql:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql (Debian package)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "please install postgresql (needed by tests/service/test_service_replicas.py)"; fi; \
	fi
	@# iptables: the replicas' network partition (tests/support/postgres.py, PostgresServer.partition)
	@if ! command -v iptables >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing iptables (Debian package)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; \
	fi

# The JupyterHub test (tests/service/test_service_hub.py) runs a real hub behind configurable-http-proxy,
# JupyterHub's own proxy from npm (Node.js: Debian's nodejs and npm), installed into .hub-proxy/.
CHP_VERSION := 5.3.0
CHP := .hub-proxy/node_modules/.bin/configurable-http-proxy
hub-proxy: $(CHP)
$(CHP):
	@if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing nodejs and npm (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	  else echo "please install nodejs and npm (needed by tests/service/test_service_hub.py)"; exit 1; fi; \
	fi
	npm install --silent --no-audit --no-fund --prefix .hub-proxy configurable-http-proxy@$(CHP_VERSION)

# The kit's JupyterLab extension (labextension/, issue 51): shipped prebuilt (attnkit_lab/labextension/,
# committed), so pip installs it without Node; make test installs it into .venv for the lab test.
# Its npm packages come from labextension/package-lock.json (npm ci), as the hub's proxy's do above;
# tests/lab/test_labextension_build.py rebuilds it from src/ with them and fails when the build differs.
LAB_STAMP := $(VENV)/.labextension-installed
LAB_NPM := labextension/node_modules/.package-lock.json
labextension: $(LAB_STAMP) $(LAB_NPM)
$(LAB_STAMP): $(STAMP) labextension/pyproject.toml $(shell find labextension/attnkit_lab labextension/jupyter-config -type f -not -path '*/__pycache__/*' 2>/dev/null)
	$(BIN)/pip install --quiet --disable-pip-version-check ./labextension
	touch $(LAB_STAMP)
$(LAB_NPM): labextension/package-lock.json
	@command -v npm >/dev/null 2>&1 || $(MAKE) --no-print-directory hub-proxy
	npm ci --silent --no-audit --no-fund --prefix labextension
# Rebuild the shipped build from source (then commit attnkit_lab/labextension/).
labextension-build: $(LAB_NPM) $(STAMP)
	rm -rf labextension/attnkit_lab/labextension labextension/lib labextension/tsconfig.tsbuildinfo
	cd labextension && PATH=$(abspath $(BIN)):$$PATH node_modules/.bin/tsc --sourceMap false && node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$$($(abspath $(BIN))/python -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" .

# An LMS download (Canvas, Moodle, Blackboard; folder or zip) into nbgrader's layout in INTO/ (default
# submitted/); then `make grade SUBMITTED=submitted`. LMS=… and TIMEZONE=… are passed on when given.
INTO     ?= submitted
collect: $(STAMP)
	@test -n "$(DOWNLOAD)" || { echo "usage: make collect DOWNLOAD=~/Downloads/submissions.zip [INTO=submitted LMS=moodle TIMEZONE=Asia/Shanghai]"; exit 2; }
	$(BIN)/attnkit collect $(DOWNLOAD) --submitted $(INTO) $(if $(LMS),--lms $(LMS)) $(if $(TIMEZONE),--timezone $(TIMEZONE))

grade: $(STAMP)
	$(BIN)/attnkit grade --submitted $(SUBMITTED) --out $(OUT) --jobs $(JOBS) --gradebook $(GRADEBOOK)

# The whole suite, then the fast tests again with a second assignment in the project (tests/conftest.py,
# --second-assignment): a course that adds one, as ARCHITECTURE.md says, must keep every test green.
# TEST_PROCESSES: the suite runs in that many processes (pytest-xdist), each test module whole in one
# of them (tests/conftest.py groups them): most of its time is waiting on the programs it starts.
TEST_PROCESSES ?= 2
test: $(DEV_STAMP) browser slurm postgresql hub-proxy labextension acl lint
	$(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --durations=25 tests
	$(MAKE) --no-print-directory test-second-assignment

test-second-assignment: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_PROCESSES) -m "not slow and not e2e and not browser" --second-assignment tests

# The inner loop: every test but those that build venvs, grade whole classes in subprocesses or run
# real kernels, or need Chromium (CONTRIBUTING.md says how long it takes).
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not e2e and not browser" tests

release: $(STAMP)
	$(BIN)/python -m attnkit.course.release

# A learner's own grading keeps its page: CHECKED/students/me/<assignment>/feedback.html (printed).
CHECKED  ?= checked
check: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make check NB=path/to/attention.ipynb"; exit 2; }
	$(BIN)/attnkit check $(NB) --out $(CHECKED)

# A learner's own copy of the release notebook in MYWORK/ (made once, never overwritten), opened in
# JupyterLab; then `make check NB=MYWORK/attention.ipynb`. As root, Jupyter needs --allow-root.
MYWORK   ?= mywork
LAB_ARGS ?=
LAB_NOTEBOOK := $(shell sed -n 's/^notebook *= *"\(.*\)"/\1/p' autograder/$(subst -,_,$(ASSIGNMENT))/manifest.toml 2>/dev/null)
lab: $(STAMP)
	@mkdir -p $(MYWORK)
	@test -e $(MYWORK)/$(LAB_NOTEBOOK) || { cp assignments/$(ASSIGNMENT)/$(LAB_NOTEBOOK) $(MYWORK)/ && echo "copied assignments/$(ASSIGNMENT)/$(LAB_NOTEBOOK) to $(MYWORK)/ (your copy: make lab never overwrites it)"; }
	@echo "opening $(MYWORK)/$(LAB_NOTEBOOK) in JupyterLab (Ctrl-C twice to stop); grade it with: make check NB=$(MYWORK)/$(LAB_NOTEBOOK)"
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS) $(MYWORK)/$(LAB_NOTEBOOK)

student-zip: $(STAMP)
	$(BIN)/python -m attnkit.course.release --assignment $(ASSIGNMENT) --zip dist/$(ASSIGNMENT)-student.zip

# What a student's own Jupyter server installs (docs/student-environment.md): the kit's wheel (the
# package alone: no autograder/, solutions/ or reference), the kit's JupyterLab extension's, and the
# lock as constraints, in one folder a hub's image or host installs from with
#   pip install -c dist/student/constraints.txt -f dist/student "attnkit[student]"
STUDENT_WHEELS := dist/student
student-wheels: $(STAMP)
	rm -rf $(STUDENT_WHEELS) build
	$(BIN)/pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w $(STUDENT_WHEELS) .
	# The kit's JupyterLab extension (labextension/, prebuilt: no Node needed to install it), which the student extra names.
	$(BIN)/pip wheel --quiet --disable-pip-version-check --no-deps -w $(STUDENT_WHEELS) ./labextension
	cp requirements.lock $(STUDENT_WHEELS)/constraints.txt
	rm -rf build
	@ls $(STUDENT_WHEELS)

# The students' environment on this host (a hub whose students are its unix users): one venv they
# all use, with the course's nbgrader_config.py lines in it (attnkit course student-config --into).
STUDENT_VENV ?= /opt/ch19-student
STUDENT_PYTHON ?= python3
student-env: student-wheels
	test -x $(STUDENT_VENV)/bin/python || $(STUDENT_PYTHON) -m venv $(STUDENT_VENV)
	$(STUDENT_VENV)/bin/pip install --disable-pip-version-check -c $(STUDENT_WHEELS)/constraints.txt -f $(STUDENT_WHEELS) "attnkit[student]"
	$(BIN)/attnkit course student-config --into $(STUDENT_VENV)

bench: $(STAMP)
	$(BIN)/python tools/bench.py

# The on-submit service, from this course root (docs/service.md); Ctrl-C stops it cleanly.
METRICS_PORT ?=
serve: $(STAMP)
	$(BIN)/attnkit serve --jobs $(JOBS) $(if $(METRICS_PORT),--metrics-port $(METRICS_PORT))

# Makes unix users (root): one submission on an idle service, then 1,000 from 400 students in 60 s.
bench-serve: $(STAMP)
	$(BIN)/python tools/bench_serve.py --flood

gradescope: $(STAMP)
	$(BIN)/python -m attnkit.course.gradescope --out dist/gradescope.zip

clean:
	rm -rf $(OUT) dist

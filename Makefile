# attnkit — every target installs what it needs into .venv on first use.
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

.PHONY: help install lock browser grade test test-fast lint release check student-zip bench bench-serve serve gradescope clean

help:
	@echo "make grade [SUBMITTED=dir OUT=dir JOBS=n]  grade a class (default: the demo class)"
	@echo "make test                                   lint (ruff, mypy), then run the whole test suite"
	@echo "make test-fast                              the suite without slow, e2e and browser tests (the inner loop)"
	@echo "make lint                                   ruff, then mypy"
	@echo "make release                                regenerate assignments/ from solutions/"
	@echo "make check NB=path/to/attention.ipynb       grade one notebook with the hidden suite"
	@echo "make student-zip                            build dist/ch19-attention-student.zip"
	@echo "make bench                                  benchmark against nbgrader autograde"
	@echo "make serve [METRICS_PORT=9339]              grade each nbgrader submit as it arrives (docs/service.md)"
	@echo "make bench-serve                            time attnkit serve: one submission, then a deadline burst (root)"
	@echo "make lock                                   regenerate requirements.lock (uv, one lock for Python 3.11-3.13)"
	@echo "make gradescope                             build dist/gradescope.zip (a Gradescope autograder; one per assignment, dist/gradescope-NAME.zip, when there are several)"

install: $(STAMP)

# .venv belongs to $(PYTHON): one made by another Python (an earlier PYTHON=python3.12, perhaps
# refused by requires-python) is removed and rebuilt, saying so, rather than reused and failing.
VENV_MISMATCH := $(shell $(PYTHON) tools/venv_mismatch.py $(VENV) 2>/dev/null)
ifneq ($(VENV_MISMATCH),)
$(STAMP): venv-rebuild
.PHONY: venv-rebuild
venv-rebuild:
	@echo "$(VENV_MISMATCH): rebuilding $(VENV) with PYTHON=$(PYTHON) (to keep it instead, run make with PYTHON set to that Python)"
	rm -rf $(VENV)
endif

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e .
	touch $(STAMP)

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
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]"
	touch $(DEV_STAMP)

# ruff, then mypy (its files and strictness are pyproject's [tool.mypy]).
lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests tools autograder examples
	$(BIN)/mypy

# The feedback-page test looks at the page in a real browser: Debian's Chromium and CJK fonts.
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and fonts-noto-cjk (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; \
	  else echo "please install chromium and fonts-noto-cjk (needed by tests/test_feedback_browser.py)"; fi; \
	fi

grade: $(STAMP)
	$(BIN)/attnkit grade --submitted $(SUBMITTED) --out $(OUT) --jobs $(JOBS) --gradebook $(GRADEBOOK)

test: $(DEV_STAMP) browser lint
	$(BIN)/python -m pytest -q tests

# The inner loop: every test but those that build venvs, grade whole classes in subprocesses or run
# real kernels, or need Chromium (CONTRIBUTING.md says how long it takes).
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not e2e and not browser" tests

release: $(STAMP)
	$(BIN)/python -m attnkit.course.release

check: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make check NB=path/to/attention.ipynb"; exit 2; }
	$(BIN)/attnkit check $(NB)

student-zip: $(STAMP)
	$(BIN)/python -m attnkit.course.release --assignment $(ASSIGNMENT) --zip dist/$(ASSIGNMENT)-student.zip

bench: $(STAMP)
	$(BIN)/python tools/bench.py

# The on-submit service, from this course root (docs/service.md); Ctrl-C stops it cleanly.
METRICS_PORT ?=
serve: $(STAMP)
	$(BIN)/attnkit serve --jobs $(JOBS) $(if $(METRICS_PORT),--metrics-port $(METRICS_PORT))

# Makes unix users (root): one submission on an idle service, then 1,000 from 400 students in 60 s.
bench-serve: $(STAMP)
	$(BIN)/python tools/bench_serve.py

gradescope: $(STAMP)
	$(BIN)/python -m attnkit.course.gradescope --out dist/gradescope.zip

clean:
	rm -rf $(OUT) dist

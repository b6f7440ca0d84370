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

.PHONY: help install browser grade test lint release check student-zip bench gradescope clean

help:
	@echo "make grade [SUBMITTED=dir OUT=dir JOBS=n]  grade a class (default: the demo class)"
	@echo "make test                                   lint (ruff), then run the whole test suite"
	@echo "make release                                regenerate assignments/ from solutions/"
	@echo "make check NB=path/to/attention.ipynb       grade one notebook with the hidden suite"
	@echo "make student-zip                            build dist/ch19-attention-student.zip"
	@echo "make bench                                  benchmark against nbgrader autograde"
	@echo "make gradescope                             build dist/gradescope.zip (a Gradescope autograder)"

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e .
	touch $(STAMP)

# The developer tools `make test` needs beyond the grader's own (the linter).
DEV_STAMP := $(VENV)/.dev-installed
$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -c requirements.lock -e ".[dev]"
	touch $(DEV_STAMP)

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests tools autograder examples

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

release: $(STAMP)
	$(BIN)/python -m attnkit.release

check: $(STAMP)
	@test -n "$(NB)" || { echo "usage: make check NB=path/to/attention.ipynb"; exit 2; }
	$(BIN)/attnkit check $(NB)

student-zip: $(STAMP)
	$(BIN)/python -m attnkit.release --assignment $(ASSIGNMENT) --zip dist/$(ASSIGNMENT)-student.zip

bench: $(STAMP)
	$(BIN)/python tools/bench.py

gradescope: $(STAMP)
	$(BIN)/python -m attnkit.gradescope --out dist/gradescope.zip

clean:
	rm -rf $(OUT) dist

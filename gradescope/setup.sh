#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (network available).
# It creates a virtualenv with the pinned dependencies (requirements.lock) and installs attnkit
# from the bundled source, in place, so the grader finds the hidden suite next to itself.
#
#   AUTOGRADER_ROOT  Gradescope's root (default /autograder); this bundle is unpacked in $ROOT/source
#   ATTNKIT_VENV     use this existing environment (it must already have attnkit and the pinned
#                    dependencies) instead of creating $ROOT/venv: for tests and local trials
#   ATTNKIT_TORCH_INDEX  an extra pip index for torch: set it to PyTorch's CPU-only wheel index
#                    to keep the image small (plain PyPI's Linux torch pulls the CUDA libraries)
set -euo pipefail

ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"

if [ -n "${ATTNKIT_VENV:-}" ]; then
    "$ATTNKIT_VENV/bin/python" -c "import attnkit.cli, torch, pytest, IPython" \
        || { echo "setup.sh: ATTNKIT_VENV=$ATTNKIT_VENV lacks attnkit or its dependencies" >&2; exit 1; }
    echo "setup.sh: using the existing environment $ATTNKIT_VENV"
    exit 0
fi

VENV="$ROOT/venv"

# attnkit supports Python 3.11.x only (see pyproject.toml; Ubuntu 22.04 images ship 3.10, 24.04 ships 3.12).
find_python() {
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

export DEBIAN_FRONTEND=noninteractive
PYTHON="$(find_python || true)"
if [ -z "$PYTHON" ]; then
    apt-get update -q
    apt-get install -y -q python3.11 python3.11-venv
    PYTHON="$(command -v python3.11)"
fi
if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    apt-get update -q
    apt-get install -y -q "$(basename "$PYTHON")-venv"
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --no-cache-dir --disable-pip-version-check)
if [ -n "${ATTNKIT_TORCH_INDEX:-}" ]; then
    PIP+=(--extra-index-url "$ATTNKIT_TORCH_INDEX")
fi
"${PIP[@]}" -r "$SOURCE/requirements.lock"
# In place (editable): attnkit's project root is then $SOURCE, so it grades with the bundled
# hidden suite ($SOURCE/autograder) and hides all of $SOURCE from the sandboxes.
"${PIP[@]}" --no-deps -e "$SOURCE"
"$VENV/bin/python" -c "import attnkit.cli, torch; print('attnkit', attnkit.__version__, 'torch', torch.__version__)"

# Student code runs as an unprivileged user; where the sandbox cannot hide folders (no mount
# namespace), plain permissions still keep the hidden tests unreadable to it.
chmod 700 "$SOURCE"

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

# attnkit supports CPython 3.11, 3.12 and 3.13 (pyproject.toml's requires-python). Ubuntu 24.04's
# image has 3.12 as python3, which is used. Ubuntu 22.04's has 3.10, and its apt `python3.11` is the
# release candidate 3.11.0~rc1, which nothing tests: rather than install that, setup stops and says
# what to choose (see gradescope/README.md): the Ubuntu 24.04 base image, or a Python of your own
# named by ATTNKIT_PYTHON (added to this script before this line, e.g. from the deadsnakes PPA).
supported() {
    "$1" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 13) and sys.version_info.releaselevel == "final"))' 2>/dev/null
}
find_python() {
    if [ -n "${ATTNKIT_PYTHON:-}" ]; then
        supported "$ATTNKIT_PYTHON" && command -v "$ATTNKIT_PYTHON"
        return
    fi
    for candidate in python3 python3.13 python3.12 python3.11; do
        if command -v "$candidate" >/dev/null 2>&1 && supported "$candidate"; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

export DEBIAN_FRONTEND=noninteractive
PYTHON="$(find_python || true)"
if [ -z "$PYTHON" ]; then
    echo "setup.sh: no final release of CPython 3.11-3.13 in this image ($(python3 --version 2>&1 || echo 'no python3'))." >&2
    echo "setup.sh: choose the Ubuntu 24.04 base image in the assignment's autograder settings (its Python 3.12 is used)," >&2
    echo "setup.sh: or install a supported Python earlier in setup.sh and set ATTNKIT_PYTHON to it (gradescope/README.md)." >&2
    exit 1
fi
echo "setup.sh: using $PYTHON ($("$PYTHON" --version 2>&1))"
if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    apt-get update -q
    apt-get install -y -q "$(basename "$PYTHON")-venv"
fi

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/pip" install --no-cache-dir --disable-pip-version-check)
if [ -n "${ATTNKIT_TORCH_INDEX:-}" ]; then
    PIP+=(--extra-index-url "$ATTNKIT_TORCH_INDEX")
fi
# requirements.lock is universal (every Python and platform, CUDA pins behind markers), so it is a
# constraint, not a list: pip installs what attnkit needs here at the locked versions, and a CPU
# torch from ATTNKIT_TORCH_INDEX pulls no CUDA packages.
# In place (editable): attnkit's project root is then $SOURCE, so it grades with the bundled
# hidden suite ($SOURCE/autograder) and hides all of $SOURCE from the sandboxes.
"${PIP[@]}" -c "$SOURCE/requirements.lock" -e "$SOURCE"
"$VENV/bin/python" -c "import attnkit.cli, torch; print('attnkit', attnkit.__version__, 'torch', torch.__version__)"

# Student code runs as an unprivileged user; where the sandbox cannot hide folders (no mount
# namespace), plain permissions still keep the hidden tests unreadable to it.
chmod 700 "$SOURCE"

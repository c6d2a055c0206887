# Sourced by scripts/run and scripts/test: create .venv beside the project and install into it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "sandbox-supervisor needs Python 3.11 or newer as '$python' (set PYTHON=...)" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv .venv 2>/dev/null; then
        rm -rf .venv
        echo "cannot create a virtual environment; on Debian: apt-get install python3-venv" >&2
        exit 1
    fi
fi
stamp=".venv/.installed-$1"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    # The build backend's deprecation warnings are noise to a user; errors still show.
    PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$1]"
    touch "$stamp"
fi

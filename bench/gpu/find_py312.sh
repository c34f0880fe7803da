#!/usr/bin/env bash
# Prints a Python 3.12 that runs (the device's Python: prepare.sh resolves cp312 wheels with it), else says in one
# line how to name one and exits 1. A `python3.12` on PATH may be a version manager's shim that fails ("command
# not found" for a version not selected), so every candidate must answer, and the versions such managers keep
# are tried too.
#
#   bash bench/gpu/find_py312.sh          # PY312=/path/to/python3.12 names one (it must work)
set -uo pipefail
works() { [ -n "$1" ] && "$1" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; }
if [ -n "${PY312:-}" ]; then
    works "$PY312" && { echo "$PY312"; exit 0; }
    echo "find_py312: PY312=$PY312 is not a working Python 3.12" >&2; exit 1
fi
for c in "$(command -v python3.12 || true)" /usr/bin/python3.12 /usr/local/bin/python3.12 \
         "$HOME"/.pyenv/versions/3.12*/bin/python3.12 "$HOME"/.local/share/uv/python/cpython-3.12*/bin/python3.12 \
         "$(command -v uv >/dev/null && uv python find 3.12 2>/dev/null || true)"; do
    works "$c" && { echo "$c"; exit 0; }
done
echo "find_py312: no working Python 3.12 (tried python3.12 on PATH, /usr/bin, /usr/local/bin, pyenv's and uv's" \
     "versions); name one: PY312=/path/to/python3.12 bash bench/gpu/prepare.sh" >&2
exit 1

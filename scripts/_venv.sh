# Sourced by the scripts: makes .venv and installs the project with what it needs.
# Re-installs only when pyproject.toml changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${AUTOLOOP_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "autoloop needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.autoloop-installed-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "==> installing autoloop and its dependencies into $VENV (first run takes a minute)" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q -e "$ROOT[dev]" >&2
  rm -f "$VENV"/.autoloop-installed-*
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"

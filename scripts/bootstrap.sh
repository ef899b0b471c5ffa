# Sourced by scripts/opspilot and scripts/test: a project-local virtualenv with OpsPilot installed.
# Re-installs only when pyproject.toml changed, so repeated runs start fast.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OPSPILOT_VENV:-$ROOT/.venv}"
EXTRAS="${1:-}"

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "OpsPilot needs Python 3.11 or newer (found: $("$PY" --version 2>&1 || echo none))." >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "Creating $VENV ..." >&2
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.opspilot-installed${EXTRAS:+-$EXTRAS}"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  echo "Installing OpsPilot${EXTRAS:+ [$EXTRAS]} into $VENV (about 30 s the first time) ..." >&2
  LOG="$VENV/install.log"  # pip's and setuptools' chatter goes here; shown only when the install fails
  if ! { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip &&
         "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT${EXTRAS:+[$EXTRAS]}"; } \
       > "$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    echo "Installing OpsPilot failed (the whole log: $LOG)." >&2
    exit 1
  fi
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"

# Shared by scripts/demo and scripts/test: one virtualenv (.venv), one pinned install.
# Usage: source scripts/_venv.sh EXTRAS   (e.g. "torch" or "all,dev")
set -euo pipefail
BRIDGE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV="${BRIDGE_VENV:-$BRIDGE_ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bridge] creating virtualenv $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
echo "[bridge] installing bridge[$1] (pinned by constraints.txt)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  -c "$BRIDGE_ROOT/constraints.txt" -e "$BRIDGE_ROOT[$1]"
export PATH="$VENV/bin:$PATH"

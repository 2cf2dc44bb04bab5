# Shared by scripts/demo and scripts/test: one virtualenv (.venv), one pinned install.
# Usage: source scripts/_venv.sh EXTRAS   (e.g. "torch" or "all,dev")
# pip's output is cut to one line per package (no progress bars, so CI logs stay short) and kept in
# full in $VENV/pip-install.log, whose end is shown if the install fails.
set -euo pipefail
BRIDGE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
VENV="${BRIDGE_VENV:-$BRIDGE_ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[bridge] creating virtualenv $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi
echo "[bridge] installing bridge-convert[$1] (pinned by constraints.txt; full pip log: $VENV/pip-install.log)"
# the distribution was called "bridge" before (a name the package index gives another project): a .venv made
# then holds it too; it goes, so one distribution owns the bridge command
"$VENV/bin/python" -m pip uninstall --disable-pip-version-check -y -q bridge >/dev/null 2>&1 || true
_bridge_pip_lines() {
  # one line per package pip fetches, a count of those already there, then pip's own summary
  awk '
    /^Collecting /            { sub(/^Collecting /, ""); printf "[bridge]   %s\n", $0; fflush(); next }
    /^ *Downloading .*\.metadata/ { next }
    /^ *Downloading /         { if (match($0, /\([^)]*\)/)) { printf "[bridge]     downloading %s\n", substr($0, RSTART, RLENGTH); fflush() } next }
    /^Requirement already satisfied/ { have++; next }
    /^Installing collected packages/ { n = split($0, a, ","); printf "[bridge]   installing %d package(s)...\n", n; fflush(); next }
    /^Successfully installed/ { printf "[bridge]   %s\n", $0; fflush(); next }
    /^(ERROR|WARNING)/        { print; fflush(); next }
    END { if (have) printf "[bridge]   %d requirement(s) already installed\n", have }
  '
}
if ! PYTHONUNBUFFERED=1 "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
     -c "$BRIDGE_ROOT/constraints.txt" -e "$BRIDGE_ROOT[$1]" 2>&1 \
     | tee "$VENV/pip-install.log" | _bridge_pip_lines; then
  echo "[bridge] pip install failed; the end of $VENV/pip-install.log:" >&2
  tail -n 30 "$VENV/pip-install.log" >&2
  exit 1
fi
export PATH="$VENV/bin:$PATH"

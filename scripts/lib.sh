# Shared by scripts/start and scripts/test. Installs only what is missing, so a second run is fast.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "Installing Debian packages needs root (or run the missing install yourself): $*" >&2
    exit 1
  fi
}

apt_install() {
  # apt_install BINARY PACKAGE...: install PACKAGE(s) unless BINARY is already there.
  local binary="$1"; shift
  if command -v "$binary" >/dev/null 2>&1 || [ -x "$binary" ]; then return 0; fi
  need_root "$@"
  say "Installing Debian packages: $*"
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

python_env() {
  # Python 3.11+ with venv; Debian's python3-venv when the interpreter lacks it.
  local python="${PYTHON:-python3}"
  if ! command -v "$python" >/dev/null 2>&1; then apt_install python3 python3 python3-venv; fi
  if [ ! -x "$PY" ]; then
    say "Creating the virtual environment in .venv"
    "$python" -m venv "$VENV" 2>/dev/null || { apt_install /usr/share/doc/python3-venv python3-venv; rm -rf "$VENV"; "$python" -m venv "$VENV"; }
  fi
  local stamp="$VENV/.installed-$1"
  if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    say "Installing Python packages ($1)"
    "$PY" -m pip install -q --upgrade pip >/dev/null
    if [ "$1" = "test" ]; then
      "$PY" -m pip install -q "$ROOT[test]"
    else
      "$PY" -m pip install -q "$ROOT"
    fi
    touch "$stamp"
  fi
}

# Sourced by the scripts that need an interpreter of a given version.
# find_python X.Y -> prints one: $PYTHONXY, pythonX.Y on PATH, or pyenv's (this machine image
# carries 3.12 and 3.13 there); exits 1 naming the variable to set when there is none.
find_python() {
  local cand var="PYTHON${1//./}"
  for cand in ${!var:-} "python$1" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    if "$cand" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$1')" 2>/dev/null; then echo "$cand"; return; fi
  done
  echo "$(basename "$0"): no Python $1 found (install one, e.g. pyenv install $1, or set $var)" >&2; exit 1
}

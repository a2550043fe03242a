#!/usr/bin/env bash
# Build the project's virtual environments from its own requirement files (docs/DESIGN.md):
#   .venv            the sgl-overlay tool and pytest
#   .venvs/<name>    one per requirements/<name>.txt (+ requirements/<name>-nodeps.txt, --no-deps)
# A venv is rebuilt only when its requirement files change (a stamp holds their hash).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PIP_FLAGS=(--disable-pip-version-check --no-input --progress-bar off)

stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }

ensure_venv() {  # dir, stamp, install-command...
  local dir=$1 stamp=$2; shift 2
  if [[ -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]]; then
    echo "venv $dir: up to date"; return
  fi
  echo "venv $dir: building"
  local t0=$SECONDS
  rm -rf "$dir"
  "${VENV_PYTHON:-$PYTHON}" -m venv "$dir"
  "$dir/bin/python" -m pip install -q "${PIP_FLAGS[@]}" --upgrade pip
  "$@"
  echo "$stamp" > "$dir/.stamp"
  echo "venv $dir: built in $((SECONDS - t0)) s, $(du -sh "$dir" | cut -f1)"
}

source scripts/find_python.sh

install_tool() { .venv/bin/python -m pip install -q "${PIP_FLAGS[@]}" -e python/ -r requirements/tool.txt; }
ensure_venv .venv "$(stamp_of python/pyproject.toml requirements/tool.txt)" install_tool

[[ ${1:-} == --tool-only ]] && exit 0
want=("$@")
for req in requirements/*.txt; do
  name=$(basename "$req" .txt)
  [[ $name == tool || $name == *-nodeps ]] && continue
  if [[ ${#want[@]} -gt 0 && ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  nodeps=requirements/$name-nodeps.txt
  install_target() {
    local py=.venvs/$name/bin/python
    $py -m pip install -q "${PIP_FLAGS[@]}" -r "$req"
    if [[ -f $nodeps ]]; then $py -m pip install -q "${PIP_FLAGS[@]}" --no-deps -r "$nodeps"; fi
  }
  mkdir -p .venvs
  # a requirements file may name its Python version: "# python: 3.12"
  version=$(sed -n 's/^# python: *//p' "$req" | head -1)
  VENV_PYTHON=$PYTHON
  [[ -n $version ]] && VENV_PYTHON=$(find_python "$version")
  ensure_venv ".venvs/$name" "$(stamp_of "$req" "$nodeps")" install_target
done

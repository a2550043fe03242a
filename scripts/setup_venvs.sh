#!/usr/bin/env bash
# Build the project's virtual environments from its own requirement files (docs/DESIGN.md):
#   .venv            the sgl-overlay tool and pytest
#   .venvs/<name>    one per requirements/<name>.txt (+ requirements/<name>-nodeps.txt, --no-deps)
# A venv is rebuilt only when its requirement files change (a stamp holds their hash).
# The test venvs are installed by uv (pinned in requirements/tool.txt) from the indexes pip is configured
# with: both hold torch and its CUDA wheels (~5.5 GB), which uv unpacks once into .cache/uv and hard-links
# into each venv, where pip would unpack them twice (minutes, and twice the disk).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
PIP_FLAGS=(--disable-pip-version-check --no-input --progress-bar off)

stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }

# A test venv (torch and its CUDA wheels) takes 5.5-6.5 GB, and pip runs out of space with
# messages that blame the network: refuse early, naming the folder and the space.
VENV_MIN_FREE_GB=${VENV_MIN_FREE_GB:-8}
check_free_space() {  # dir
  [[ $1 == .venv ]] && return
  local parent free
  parent=$(dirname "$1"); mkdir -p "$parent"
  free=$(df --output=avail -BG "$parent" | tail -1 | tr -dc 0-9)
  if (( free < VENV_MIN_FREE_GB )); then
    echo "setup_venvs: $1 needs about $VENV_MIN_FREE_GB GB free on the disk of $parent, which has $free GB; free some space (make clean, old clones in /tmp) and run make again" >&2
    exit 1
  fi
}

ensure_venv() {  # dir, stamp, install-command...
  local dir=$1 stamp=$2; shift 2
  if [[ -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]]; then
    echo "venv $dir: up to date"; return
  fi
  echo "venv $dir: building"
  local t0=$SECONDS
  rm -rf "$dir"
  check_free_space "$dir"
  if [[ $dir == .venv ]]; then
    "$PYTHON" -m venv "$dir"
    "$dir/bin/python" -m pip install -q "${PIP_FLAGS[@]}" --upgrade pip
  else
    .venv/bin/uv venv -q --seed --python "$VENV_PYTHON" "$dir"
  fi
  "$@"
  echo "$stamp" > "$dir/.stamp"
  echo "venv $dir: built in $((SECONDS - t0)) s, $(du -sh "$dir" | cut -f1)"
}

source scripts/find_python.sh

install_tool() { .venv/bin/python -m pip install -q "${PIP_FLAGS[@]}" -e python/ -r requirements/tool.txt; }
ensure_venv .venv "$(stamp_of python/pyproject.toml requirements/tool.txt)" install_tool

[[ ${1:-} == --tool-only ]] && exit 0

source scripts/uv_args.sh
want=("$@")
for req in requirements/*.txt; do
  name=$(basename "$req" .txt)
  [[ $name == tool || $name == *-nodeps ]] && continue
  if [[ ${#want[@]} -gt 0 && ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  nodeps=requirements/$name-nodeps.txt
  install_target() {
    local py=.venvs/$name/bin/python
    uv_install "$py" -r "$req"
    if [[ -f $nodeps ]]; then uv_install "$py" --no-deps -r "$nodeps"; fi
  }
  mkdir -p .venvs
  # a requirements file may name its Python version: "# python: 3.12"
  version=$(sed -n 's/^# python: *//p' "$req" | head -1)
  VENV_PYTHON=$PYTHON
  [[ -n $version ]] && VENV_PYTHON=$(find_python "$version")
  ensure_venv ".venvs/$name" "$(stamp_of "$req" "$nodeps")" install_target
done

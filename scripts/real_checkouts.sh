#!/usr/bin/env bash
# Run the tool as a user would on real clones (docs/real-checkouts.md):
#   scripts/real_checkouts.sh [-t TARGET] CLONE COMMIT...
# For each commit: status, apply, status, revert, apply, revert on a detached checkout,
# printing each command, its output and exit code. CLONE is a throw-away work tree.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tool=("$here/.venv/bin/sgl-overlay" --patches "$here/patches")
only=()
if [[ ${1:-} == -t ]]; then only=(-t "$2"); shift 2; fi
clone=$1; shift
run() {
  echo "\$ sgl-overlay $* ${only[*]} --checkout $clone"
  "${tool[@]}" "$@" "${only[@]}" --checkout "$clone" 2>&1
  echo "rc=$?"
}
for commit in "$@"; do
  git -C "$clone" checkout -q --detach "$commit" && git -C "$clone" reset -q --hard && git -C "$clone" clean -qfd
  echo "=== $(git -C "$clone" log -1 --format='%h %ad %s' --date=short)"
  run status; run apply; run status; run revert; run apply; run revert
  echo "tree back at $commit: $(git -C "$clone" rev-parse --short HEAD), $(git -C "$clone" status --porcelain | wc -l) changed file(s)"
done

#!/usr/bin/env bash
# Run the tool as a user would on real clones (docs/real-checkouts.md):
#   scripts/real_checkouts.sh [-t TARGET] [--hostile] [--doc FILE] CLONE COMMIT...
# For each commit: status, apply, status, revert, apply, revert on a detached checkout,
# printing each command, its output and exit code. --hostile then adds: status under GIT_DIR
# (the index must stay byte-identical), two applies at once, and kill -9 of apply at several
# delays followed by `apply --abort`. CLONE is a throw-away work tree. --doc also writes the
# transcript (the clone's path shown as <clone>, the overlay's as <overlay>) between FILE's lines
# `<!-- real_checkouts: begin -->` and `<!-- real_checkouts: end -->`.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tool=("$here/.venv/bin/sgl-overlay" --patches "$here/patches")
only=()
hostile=0
doc=""
while [[ ${1:-} == -* ]]; do
  case $1 in
    -t) only=(-t "$2"); shift 2 ;;
    --hostile) hostile=1; shift ;;
    --doc) doc=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
clone=$1; shift
run() {
  echo "\$ sgl-overlay $* ${only[*]} --checkout $clone"
  "${tool[@]}" "$@" "${only[@]}" --checkout "$clone" 2>&1
  echo "rc=$?"
}
same_tree() {  # HEAD, no change, no git operation or lock left
  local gd="$clone/.git"
  echo "tree: HEAD $(git -C "$clone" rev-parse --short HEAD) (want $(git -C "$clone" rev-parse --short "$1")), $(git -C "$clone" status --porcelain | wc -l) changed file(s), leftovers: $(ls -d "$gd"/rebase-apply "$gd"/sgl-overlay* 2>/dev/null | wc -l)"
}
hostile_runs() {
  local commit=$1 index
  index=$(sha256sum "$clone/.git/index" | cut -c1-16)
  echo "\$ GIT_DIR=$clone/.git GIT_INDEX_FILE=$clone/.git/index sgl-overlay status --checkout $clone"
  GIT_DIR="$clone/.git" GIT_INDEX_FILE="$clone/.git/index" "${tool[@]}" status "${only[@]}" --checkout "$clone" >/dev/null 2>&1
  echo "rc=$? index $index -> $(sha256sum "$clone/.git/index" | cut -c1-16)"
  echo "\$ two applies at once"
  local out
  out=$(mktemp -d)
  "${tool[@]}" apply "${only[@]}" --checkout "$clone" >"$out/a" 2>&1 &
  local a=$!
  "${tool[@]}" apply "${only[@]}" --checkout "$clone" >"$out/b" 2>&1
  local rb=$?
  wait $a
  local ra=$?
  echo "rc=$ra: $(tail -1 "$out/a" | cut -c1-200)"
  echo "rc=$rb: $(tail -1 "$out/b" | cut -c1-200)"
  rm -rf "$out"
  echo "overlay commits: $(git -C "$clone" rev-list --count "$commit"..HEAD)"
  run revert >/dev/null
  for delay in 0.3 0.6 1.0 1.5; do
    "${tool[@]}" apply "${only[@]}" --checkout "$clone" >/dev/null 2>&1 &
    local pid=$!
    sleep "$delay"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    sleep 0.5
    echo "\$ kill -9 apply after ${delay}s, then apply --abort"
    "${tool[@]}" apply --abort --checkout "$clone" 2>&1 | cut -c1-160
    run revert >/dev/null
    same_tree "$commit"
  done
}
runs() {
  for commit in "$@"; do
    git -C "$clone" checkout -q --detach "$commit" && git -C "$clone" reset -q --hard && git -C "$clone" clean -qfd
    echo "=== $(git -C "$clone" log -1 --format='%h %ad %s' --date=short)"
    run status; run apply; run status; run revert; run apply; run revert
    echo "tree back at $commit: $(git -C "$clone" rev-parse --short HEAD), $(git -C "$clone" status --porcelain | wc -l) changed file(s)"
    if ((hostile)); then hostile_runs "$(git -C "$clone" rev-parse HEAD)"; fi
  done
}
if [[ -z $doc ]]; then
  runs "$@"
  exit
fi
out=$(runs "$@" | sed "s#$clone#<clone>#g; s#$here#<overlay>#g")
printf '%s\n' "$out"
origin=$(git -C "$clone" remote get-url origin 2>/dev/null | sed 's#^.*github.com[:/]##; s#\.git$##')
python3 - "$doc" "$out" "${origin:-a local repository}" "$(git -C "$here" rev-parse --short HEAD)" "${only[*]}" "$@" <<'EOF'
import datetime
import sys

path, out, repo, tool, only, *commits = sys.argv[1:]
begin, end = "<!-- real_checkouts: begin -->", "<!-- real_checkouts: end -->"
text = open(path, encoding="utf-8").read()
if begin not in text or end not in text:
    sys.exit(f"{path} has no {begin} ... {end} lines; add them where the transcript goes")
head, rest = text.split(begin, 1)
tail = rest.split(end, 1)[1]
command = " ".join(["scripts/real_checkouts.sh", *only.split(), "--doc", path, "<clone>", *commits])
block = (
    f"{begin}\n`{command}` on a clone of {repo}, {datetime.date.today()}, overlay at `{tool}` "
    f"(written by the script):\n\n```\n{out}\n```\n{end}"
)
open(path, "w", encoding="utf-8").write(head + block + tail)
EOF

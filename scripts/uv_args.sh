# Sourced by the scripts that install with uv. uv reads none of pip's settings itself: UV_ARGS gets pip's
# configuration (pip.conf, PIP_* variables) as uv options, the same indexes, find-links and constraints; the
# first index that has a pinned version wins, so a version on this machine's disk is never downloaded.
# UV_CACHE_DIR is .cache/uv, beside .venvs on one disk: uv hard-links from it instead of copying.
UV_ARGS=(--index-strategy unsafe-best-match)
pip_setting() { .venv/bin/python -m pip config get "global.$1" 2>/dev/null || true; }
for url in $(pip_setting index-url) ${PIP_INDEX_URL:-}; do UV_ARGS+=(--index-url "$url"); done
for url in $(pip_setting extra-index-url) ${PIP_EXTRA_INDEX_URL:-}; do UV_ARGS+=(--extra-index-url "$url"); done
for dir in $(pip_setting find-links) ${PIP_FIND_LINKS:-}; do UV_ARGS+=(--find-links "$dir"); done
for file in $(pip_setting constraint) ${PIP_CONSTRAINT:-}; do UV_ARGS+=(--constraint "$file"); done
cert=$(pip_setting cert)
if [[ -n $cert ]]; then export SSL_CERT_FILE=${SSL_CERT_FILE:-$cert}; fi
export UV_CACHE_DIR=${UV_CACHE_DIR:-$PWD/.cache/uv}
uv_install() { .venv/bin/uv pip install -q --python "$1" "${UV_ARGS[@]}" "${@:2}"; }  # python, pip arguments

#!/usr/bin/env bash
# Create/refresh the project's virtualenv (.venv) from requirements.lock. Idempotent.
#
#   1. checks Java >= 17 (Spark 4 needs it)
#   2. creates .venv with Python 3.11 if missing (or broken)
#   3. installs uv into it with pip
#   4. uv pip install -r requirements.lock   (exact pins)
#   5. uv pip install --no-deps -e .         (this project, editable)
#   6. verifies pyspark is 4.2.0 (python files *and* jars; pyspark-client shares its files, so a mismatched pin overwrites them)
#
# A stamp file .venv/.installed-<hash of requirements.lock + pyproject.toml + project path>
# makes a second run a fast no-op. Force a reinstall with FORCE=1.
# Environment knobs: PYTHON (interpreter to build the venv with), VENV (default .venv),
# UV_CACHE_DIR (uv's cache, default ~/.cache/uv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="${VENV:-.venv}"
UV_VERSION="0.13.9"
PYSPARK_VERSION="4.2.0"
START=$SECONDS

log() { echo "[bootstrap] $*"; }
die() { echo "[bootstrap] ERROR: $*" >&2; exit 1; }

# --- 1. Java -----------------------------------------------------------------------------
"$ROOT/scripts/check_java.sh"

# --- 2. Python 3.11 venv -------------------------------------------------------------------
is_py311() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1; }

find_python() {
  local c
  for c in "${PYTHON:-}" python3.11 /root/.pyenv/shims/python3.11 python3 /root/.pyenv/shims/python3 \
           /root/.pyenv/versions/3.11*/bin/python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11; do
    [ -n "$c" ] || continue
    if command -v "$c" >/dev/null 2>&1 && is_py311 "$c"; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

if [ -e "$VENV" ] && ! is_py311 "$VENV/bin/python"; then
  log "$VENV exists but its python is missing or not 3.11: recreating it"
  rm -rf "$VENV"
fi

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python)" || die "Python 3.11 not found. Install it (e.g. 'pyenv install 3.11' or
  'apt-get install -y python3.11 python3.11-venv') or point PYTHON=/path/to/python3.11."
  log "creating $VENV with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV"
else
  log "$VENV exists ($("$VENV/bin/python" --version 2>&1))"
fi
VPY="$ROOT/$VENV/bin/python"
[ "${VENV#/}" != "$VENV" ] && VPY="$VENV/bin/python"

# --- stamp: skip everything below when nothing changed --------------------------------------
HASH="$( { cat requirements.lock pyproject.toml; echo "$ROOT"; echo "$UV_VERSION"; } | sha256sum | cut -c1-16)"
STAMP="$VENV/.installed-$HASH"

verify_pyspark() {
  # Reads files only (no `import pyspark`, which would start importing py4j/pandas): fast.
  "$VPY" - "$PYSPARK_VERSION" <<'PYEOF'
import glob, importlib.metadata as md, importlib.util, os, re, sys
want = sys.argv[1]
problems = []
dist = md.version("pyspark")
if dist != want:
    problems.append(f"pyspark distribution is {dist}, expected {want}")
spec = importlib.util.find_spec("pyspark")
if spec is None or not spec.submodule_search_locations:
    sys.exit("[bootstrap] ERROR: pyspark is not importable")
pkg = list(spec.submodule_search_locations)[0]
src = open(os.path.join(pkg, "version.py"), encoding="utf-8").read()
m = re.search(r"__version__[^=]*=\s*['\"]([^'\"]+)['\"]", src)
pyver = m.group(1) if m else "?"
if pyver != want:
    problems.append(f"pyspark/version.py says {pyver}, expected {want} (pyspark-client overwrite?)")
jars = glob.glob(os.path.join(pkg, "jars", "spark-core_*.jar"))
if not jars:
    problems.append("no pyspark/jars/spark-core_*.jar: pyspark looks like the jar-less pyspark-client")
elif not any(j.endswith(f"-{want}.jar") for j in jars):
    problems.append(f"Spark jars are {[os.path.basename(j) for j in jars]}, expected version {want}")
if problems:
    for p in problems:
        print(f"[bootstrap] ERROR: {p}", file=sys.stderr)
    sys.exit(1)
print(f"[bootstrap] ok: pyspark {want} (dist, python files and jars agree) at {pkg}")
PYEOF
}

if [ -f "$STAMP" ] && [ "${FORCE:-0}" != "1" ]; then
  if verify_pyspark; then
    log "up to date ($STAMP); nothing to do ($((SECONDS - START)) s). FORCE=1 to reinstall."
    exit 0
  fi
  log "stamp present but the environment is damaged: reinstalling"
  rm -f "$STAMP"
fi

# --- 3. uv -----------------------------------------------------------------------------------
if [ ! -x "$VENV/bin/uv" ] || [ "$("$VENV/bin/uv" --version 2>/dev/null | awk '{print $2}')" != "$UV_VERSION" ]; then
  if ! "$VPY" -m pip --version >/dev/null 2>&1; then
    log "bootstrapping pip into $VENV (ensurepip)"
    "$VPY" -m ensurepip --upgrade >/dev/null
  fi
  log "installing uv==$UV_VERSION into $VENV with pip"
  "$VPY" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
UV="$VENV/bin/uv"

# --- 4./5. dependencies + project --------------------------------------------------------------
export UV_COMPILE_BYTECODE=1      # the environment sets PYTHONDONTWRITEBYTECODE=1; imports would be slow
export UV_NO_PROGRESS=1
# pyspark and pyspark-client ship only as source packages (pyspark: 456 MB). uv builds them into
# wheels at every install here (the registry's answers defeat uv's cache revalidation, so each
# install rebuilds, ~30 s, and adds ~450 MB to uv's cache). We keep the built wheels in a
# wheelhouse outside the work tree and offer them with --find-links (uv prefers a wheel of the
# pinned version over the sdist).
WHEELHOUSE="${DBSP_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/dbsp-spark/wheels}"
WHEELS=(pyspark-${PYSPARK_VERSION}-py2.py3-none-any.whl pyspark_client-${PYSPARK_VERSION}-py2.py3-none-any.whl)
FIND_LINKS=()
if [ -f "$WHEELHOUSE/${WHEELS[0]}" ]; then
  FIND_LINKS=(--find-links "$WHEELHOUSE")
  log "using prebuilt pyspark wheels from $WHEELHOUSE"
fi

# uv's summary ("Resolved 180 packages", "Installed 150 packages in 9s"), not its list of every
# package (" + name==version" lines, about 150 of them on a fresh venv); errors pass through.
# DBSP_BOOTSTRAP_VERBOSE=1 shows the list.
summary_only() {
  if [ "${DBSP_BOOTSTRAP_VERBOSE:-0}" = "1" ]; then "$@"; return; fi
  "$@" 2>&1 | { grep -vE '^ [-+~] ' || true; }
  return "${PIPESTATUS[0]}"
}

T=$SECONDS
log "uv pip install -r requirements.lock (exact pins; cold: downloads ~1 GB and builds pyspark)"
if ! summary_only "$UV" pip install --python "$VPY" "${FIND_LINKS[@]}" -r requirements.lock; then
  [ ${#FIND_LINKS[@]} -gt 0 ] || die "uv pip install -r requirements.lock failed"
  log "install with the wheelhouse failed: dropping its pyspark wheels and retrying from the index"
  for w in "${WHEELS[@]}"; do rm -f "$WHEELHOUSE/$w"; done
  summary_only "$UV" pip install --python "$VPY" -r requirements.lock || die "uv pip install -r requirements.lock failed"
fi
log "  dependencies done in $((SECONDS - T)) s"

T=$SECONDS
log "uv pip install --no-deps -e . (dbsp-spark, editable)"
summary_only "$UV" pip install --python "$VPY" --no-deps -e .
log "  project done in $((SECONDS - T)) s"

# --- 6. verify --------------------------------------------------------------------------------
verify_pyspark
"$VPY" -c 'import importlib.metadata as md; md.distribution("dbsp-spark")' \
  || die "the project (dbsp-spark) is not installed in $VENV"

# Save the wheels uv just built into the wheelhouse for the next fresh venv (best effort).
save_wheels() {
  local cache w src
  cache="$("$UV" cache dir 2>/dev/null)" || return 0
  mkdir -p "$WHEELHOUSE" 2>/dev/null || return 0
  for w in "${WHEELS[@]}"; do
    [ -f "$WHEELHOUSE/$w" ] && continue
    src="$(ls -t "$cache"/sdists-v*/pypi/*/"$PYSPARK_VERSION"/*/"$w" 2>/dev/null | head -n 1)" || true
    [ -n "$src" ] || continue
    if "$VPY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).namelist()' "$src" 2>/dev/null \
       && cp "$src" "$WHEELHOUSE/.$w.tmp" && mv "$WHEELHOUSE/.$w.tmp" "$WHEELHOUSE/$w"; then
      log "saved $w to $WHEELHOUSE"
    fi
  done
}
save_wheels || true

rm -f "$VENV"/.installed-*
date -u +"%Y-%m-%dT%H:%M:%SZ" > "$STAMP"
log "done in $((SECONDS - START)) s; stamp $STAMP"

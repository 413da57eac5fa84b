#!/usr/bin/env bash
# Check that a Java runtime >= 17 is on PATH (Spark 4 needs it). Exit 1 with a fix if not.
set -euo pipefail
MIN_JAVA="${MIN_JAVA:-17}"

fail() {
  cat >&2 <<MSG
[check_java] ERROR: $1
[check_java] Spark 4 needs Java ${MIN_JAVA} or newer. On Debian/Ubuntu install it with:
[check_java]     apt-get update && apt-get install -y openjdk-17-jre-headless
[check_java] (or put another JDK >= ${MIN_JAVA} first on PATH / set JAVA_HOME).
MSG
  exit 1
}

JAVA_BIN=java
if [ -n "${JAVA_HOME:-}" ] && [ -x "${JAVA_HOME}/bin/java" ]; then
  JAVA_BIN="${JAVA_HOME}/bin/java"
fi
command -v "$JAVA_BIN" >/dev/null 2>&1 || fail "no 'java' found on PATH"

# `java -version` prints to stderr, e.g.: openjdk version "17.0.15" 2025-04-15
ver_line="$("$JAVA_BIN" -version 2>&1 | head -n 1)" || fail "'$JAVA_BIN -version' failed: $ver_line"
ver="$(printf '%s\n' "$ver_line" | sed -n 's/.*version "\([^"]*\)".*/\1/p')"
[ -n "$ver" ] || fail "could not read a version from: $ver_line"
major="${ver%%.*}"
if [ "$major" = "1" ]; then        # old scheme: 1.8.0_392 -> 8
  major="$(printf '%s' "$ver" | cut -d. -f2)"
fi
major="${major%%[!0-9]*}"
[ -n "$major" ] || fail "could not parse the Java version '$ver'"
if [ "$major" -lt "$MIN_JAVA" ]; then
  fail "found Java $ver ($(command -v "$JAVA_BIN")), which is older than ${MIN_JAVA}"
fi
echo "[check_java] ok: Java $ver ($(command -v "$JAVA_BIN"))"

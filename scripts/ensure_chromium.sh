#!/usr/bin/env bash
# Make sure Debian's Chromium is installed for the browser test of the Airflow UI
# (tests/test_airflow_e2e.py::test_the_ui_in_a_browser; Playwright drives it, it downloads no
# browser of its own). Run by `make test` before pytest. Idempotent: a no-op (well under a second)
# when /usr/bin/chromium exists.
#
# Installs with `apt-get install -y chromium` when it can (root, apt-get, Debian's packages reach-
# able; a first install takes about a minute and ~300 MB). When it cannot, it says why and exits 0:
# the browser test then skips with that reason, and every other test runs.
# DBSP_NO_BROWSER=1 skips the install (and so the browser test).
set -uo pipefail

CHROMIUM="${DBSP_CHROMIUM:-/usr/bin/chromium}"
log() { echo "[chromium] $*"; }

[ -x "$CHROMIUM" ] && exit 0
if [ "${DBSP_NO_BROWSER:-0}" = "1" ]; then
  log "DBSP_NO_BROWSER=1: not installing Chromium; the browser test will be skipped"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "no apt-get on this machine: install Chromium at $CHROMIUM by hand, or the browser test is skipped"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  log "not root: run 'sudo apt-get install -y chromium' once, or the browser test is skipped"
  exit 0
fi
start=$SECONDS
log "installing Debian's chromium for the browser test (apt-get; about a minute, once)"
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; then
  log "installed $("$CHROMIUM" --version 2>/dev/null) in $((SECONDS - start)) s"
else
  log "apt-get install chromium failed (see above): the browser test will be skipped"
fi
exit 0

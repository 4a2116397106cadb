#!/usr/bin/env bash
# Installs Debian's chromium package when no Chromium is available: the web
# app's browser tests (serve.TestBrowser) and the main job's screenshot drive
# headless Chromium. $VEIL_CHROMIUM names another browser instead. Needs root
# to install (CI runs the test command as root on a clean machine).
set -euo pipefail
if [ -n "${VEIL_CHROMIUM:-}" ] || command -v chromium >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-chromium: chromium is missing and this is not root: run apt-get install chromium as root, or set VEIL_CHROMIUM" >&2
  exit 1
fi
echo "install-chromium: installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null

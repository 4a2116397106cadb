#!/usr/bin/env bash
# Installs the pinned pretrained face networks (@vladmandic/face-api, see
# scripts/models/package-lock.json) into models/ (ignored by git). Veil reads
# only the weight files and demo photos; no JavaScript is run. Every weight
# file is checked against face/nets/models.sha256 before Veil loads it.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dest="$top/models"
want="$dest/node_modules/@vladmandic/face-api/model/face_recognition_model.bin"
if [ -f "$want" ] && cmp -s "$top/scripts/models/package-lock.json" "$dest/package-lock.json"; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-models: npm is needed; installing Debian's nodejs and npm" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
mkdir -p "$dest"
cp "$top/scripts/models/package.json" "$top/scripts/models/package-lock.json" "$dest/"
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
echo "install-models: face networks installed in $dest" >&2

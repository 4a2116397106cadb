#!/usr/bin/env bash
# Regenerates face/nets/testdata/faceapi_grey.json: face-api 1.7.15 itself
# (TF.js 4.22, wasm backend; versions pinned by package-lock.json here) runs
# both detectors on the images listed in images.txt (paths under the shared
# data folder), in colour and as greyscale copies. The pixels are Veil's own
# decode (jpeg2rgb), so the comparison in face/nets/greyscale_test.go tests
# the networks, not two JPEG decoders. Needs Go, Node 20 and npm, and the
# models installed by scripts/install-models.sh. Takes a few minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
data=${VEIL_DATA:-$top/../shared/data}
models=$top/models/node_modules/@vladmandic/face-api/model
(cd "$here" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mapfile -t images < "$here/images.txt"
(cd "$top" && GOEXPERIMENT=simd go run ./scripts/faceapi-ref/jpeg2rgb -root "$data" -out "$tmp" "${images[@]}")
node "$here/detect.js" "$tmp/manifest.json" "$models" "$top/face/nets/testdata/faceapi_grey.json"

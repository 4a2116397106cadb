#!/usr/bin/env bash
# The main job (README): the most complete end-to-end run Veil can do so far.
#  1. face verification on LFW's development protocol with the pretrained
#     networks (threshold from pairsDevTrain.txt, scored on pairsDevTest.txt);
#  2. face detection with boxes and landmarks drawn on face-api's demo photos.
# Results go to out/ (verify.json, demo-*.png).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false
data=${VEIL_DATA:-$(cd "$top/.." && pwd)/shared/data}
if [ ! -d "$data/lfw" ]; then
  echo "main-job: no LFW data in $data/lfw (set VEIL_DATA to the data folder)" >&2
  exit 1
fi

scripts/install-models.sh
go build -o bin/veil ./cmd/veil
mkdir -p out
lfw=(--images "$data/lfw/images_deepfunneled" --pairs "$data/lfw/pairsDevTest.txt" --train-pairs "$data/lfw/pairsDevTrain.txt")

echo "== LFW development pairs (veil verify)"
bin/veil verify "${lfw[@]}"
# Same settings again: answered from the descriptor cache, saved as JSON.
bin/veil verify "${lfw[@]}" --json --quiet > out/verify.json
echo "verification report: out/verify.json"

echo "== face detection on face-api's demo photos (veil detect --draw)"
demo=models/node_modules/@vladmandic/face-api/demo
bin/veil detect --draw out/demo.png "$demo"/sample{1,2,3,4,5,6}.jpg

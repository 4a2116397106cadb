#!/usr/bin/env bash
# The main job (README): the most complete end-to-end run Veil can do so far.
#  1. face verification on LFW's development protocol with the pretrained
#     networks (threshold from pairsDevTrain.txt, scored on pairsDevTest.txt);
#  2. face detection with boxes and landmarks drawn on face-api's demo photos;
#  3. private learning: an embedding head on public features (face-api's
#     age/gender network, never trained on identities) trained on LFW's
#     development training identities with DP-SGD at ε = 8, δ = 1e-5, and the
#     same run without DP, both scored on the development pairs.
#  4. face tagging: a small encrypted photo library of LFW people
#     (scripts/main-job-tagging.sh): people, clusters and suggestions
#     (out/library, out/tagging-*.json).
#  5. federated learning: veil fed sim --secagg masking --network, 8 clients
#     with disjoint identities over gRPC and mutual TLS, distributed DP-SGD
#     under SecAgg+ masking at ε = 8 per identity per client (out/fed-sim.json).
#  6. the tagging app: veil serve on out/library, the people page screenshot
#     in headless Chromium (out/serve-people.png), then the server stopped.
# Results go to out/ (verify.json, demo-*.png, train-dp.json, train-nodp.json).
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
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
go build -ldflags "-X github.com/veil-privacy/veil/cmd/veil/cli.buildCommit=$commit" -o bin/veil ./cmd/veil
mkdir -p out
lfw=(--images "$data/lfw/images_deepfunneled" --pairs "$data/lfw/pairsDevTest.txt" --train-pairs "$data/lfw/pairsDevTrain.txt")

echo "== LFW development pairs (veil verify)"
# The report is this run's (its wall_s is the verification's own time).
bin/veil verify "${lfw[@]}" --report out/verify.json
echo "verification report: out/verify.json"

echo "== face detection on face-api's demo photos (veil detect --draw)"
demo=models/node_modules/@vladmandic/face-api/demo
bin/veil detect --draw out/demo.png "$demo"/sample{1,2,3,4,5,6}.jpg

echo "== private learning on LFW's training identities (veil train --dp, ε = 8 per identity)"
# The head learns each training image's descriptor (the pipeline above, as
# teacher) from public age/gender features; no identity labels are used by
# the loss. DP-SGD protects each person (all of their images): people are
# Poisson-sampled and each sampled person's gradients are clipped together.
# The run charges the privacy ledger of the lfw data set (per identity),
# whose budget becomes ε = 8. The job keeps its own ledger folder, started
# afresh on each run: repeating an experiment is the owner's explicit
# choice, and the user's own ledgers (~/.local/share/veil/ledgers) are left
# alone. Without this a second run of the job is refused: the people's
# budget is spent.
export VEIL_LEDGERS="$top/out/ledgers"
rm -rf "$VEIL_LEDGERS"
head=(--model head --features agegender --loss distill --min-images 1 --epochs 20 --ema 0.95
  --data "$data/lfw" --centre-images "$data/mtfl/net_7876")
bin/veil train "${head[@]}" --batch 512 --dp --target-epsilon 8 --delta 1e-5 --clip 1 \
  --checkpoint out/head-dp.ckpt --report out/train-dp.json
echo "== the same head without DP (no privacy: the reference)"
bin/veil train "${head[@]}" --batch 128 --checkpoint out/head-nodp.ckpt --quiet --report out/train-nodp.json

echo "== face tagging: an encrypted photo library (veil library, faces, people, suggest)"
VEIL_BIN=bin/veil scripts/main-job-tagging.sh

echo "== federated learning (veil fed sim --secagg masking --network): 8 clients, distributed DP-SGD, ε = 8 per identity per client"
# A coordinator and 8 clients over gRPC with mutual TLS on loopback: every
# round is one step of central DP-SGD over all the clients' people, each
# client adding a share of the noise to its clipped gradient sum under
# SecAgg+ masking, so the coordinator sees only the sum of the 8 masked
# vectors; each client's own ledger and the coordinator's copy enforce its
# budget. Scored on the development pairs like the runs above.
bin/veil fed sim --secagg masking --network --quiet --json > out/fed-sim.json
python3 - out/fed-sim.json <<'PY' 2>/dev/null || cat out/fed-sim.json
import json, sys
r = json.load(open(sys.argv[1]))
eps = r.get("epsilon_per_client", {})
print(f"federation: {r['strategy']}, {r['clients']} clients, {r['rounds']} rounds, development-pairs accuracy "
      f"{r['dev_accuracy']:.4f}, ε per client ≤ {max(eps.values()):.3f} (δ = {r['delta']}), "
      f"{r['bytes_per_client_round']/1e6:.2f} MB per client per round, {r['failed_rounds']} failed rounds, {r['wall_s']:.0f} s")
PY
echo "federation report: out/fed-sim.json"

# The job's figures in one place (issue 23: the job ended without a summary).
echo "== summary"
python3 - out <<'PY' 2>/dev/null || ls -l out/*.json
import json, os, sys
d = sys.argv[1]
def load(n):
    with open(os.path.join(d, n)) as f:
        return json.load(f)
v = load("verify.json")
print(f"LFW development pairs (veil verify):      accuracy {v['accuracy']:.4f}, ROC AUC {v['auc']:.4f}, EER {v['eer']:.4f}, {v['wall_s']:.0f} s")
for name, label in (("train-dp.json", "DP head"), ("train-nodp.json", "no-DP head")):
    t = load(name)
    eps = f", ε = {t['epsilon']:.3g} per {t.get('privacy_unit', '?')} (δ = {t['delta']:g})" if t.get("epsilon") is not None else ", no DP"
    print(f"{label + ' (veil train):':41} development pairs {t['dev_accuracy']:.4f}{eps}")
s = load("tagging-summary.json")
print(f"tagging demo (veil suggest):              {s['right']} right, {s['wrong']} wrong of {s['suggestions']} suggestions; "
      f"{s['strangers_suggested']} to strangers")
r = load("fed-sim.json")
eps = r.get("epsilon_per_client", {})
print(f"federation (veil fed sim):                development pairs {r['dev_accuracy']:.4f}, {r['strategy']}, {r['clients']} clients, "
      f"ε per client ≤ {max(eps.values()):.3g} per {r.get('privacy_unit', '?')}")
PY
echo "== the tagging app in a browser: veil serve on out/library, a screenshot of the people page"
scripts/install-chromium.sh
go build -o bin/veil-screenshot ./cmd/veil-screenshot
VEIL_PASSPHRASE=${VEIL_DEMO_PASSPHRASE:-veil demo library, not a secret} \
  bin/veil serve --library out/library --addr 127.0.0.1:0 --no-faces > out/serve.log 2>&1 &
serve_pid=$!
url=
for _ in $(seq 1 600); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' out/serve.log | head -1 || true)
  [ -n "$url" ] && break
  if ! kill -0 "$serve_pid" 2>/dev/null; then
    echo "main-job: veil serve stopped:" >&2; cat out/serve.log >&2; exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  kill "$serve_pid"; echo "main-job: veil serve did not start in 60 s" >&2; exit 1
fi
shot_status=0
bin/veil-screenshot --url "$url" --out out/serve-people.png || shot_status=$?
kill -TERM "$serve_pid"
wait "$serve_pid" || true
[ "$shot_status" = 0 ] || exit "$shot_status"
echo "the people page: out/serve-people.png (veil serve's log: out/serve.log)"

echo "main job: $SECONDS s"

#!/usr/bin/env bash
# The tagging part of the main job (scripts/main-job.sh calls it): a small
# demo photo library, used as a person would use it.
#  1. out/library-photos: links to 5 photos each of 12 people of LFW's
#     development *test* identities (the suggestion and clustering thresholds
#     were chosen on the *training* identities) and 8 single-photo people as
#     strangers, whom the "user" never names;
#  2. out/library: an encrypted library (veil library init), the photos
#     indexed (veil library add);
#  3. the user names photos _0001 and _0002 of each person (TAGGING_NAMES=1..3
#     changes how many), knowing who is who from LFW's file names, which
#     carry the person's name;
#  4. prints the people, the clusters of unnamed faces and the suggestions
#     (with the review queue), checks the suggestions against the file names,
#     and writes out/tagging-{add,people,clusters,suggestions,status,summary}.json.
# Rerunnable: a second run reuses out/library (nothing to index, names given
# again are no-ops) if it opens with the demo passphrase and holds exactly
# the demo's photos; otherwise it rebuilds it from scratch.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false
data=${VEIL_DATA:-$(cd "$top/.." && pwd)/shared/data}
lfw=$data/lfw
if [ ! -d "$lfw/images_deepfunneled" ]; then
  echo "main-job-tagging: no LFW data in $lfw (set VEIL_DATA to the data folder)" >&2
  exit 1
fi
veil=${VEIL_BIN:-bin/veil}
if [ -z "${VEIL_BIN:-}" ]; then
  go build -ldflags "-X github.com/veil-privacy/veil/cmd/veil/cli.buildCommit=$(git rev-parse HEAD 2>/dev/null || echo unknown)" -o bin/veil ./cmd/veil
fi
names=${TAGGING_NAMES:-2}
case $names in 1 | 2 | 3) ;; *) echo "main-job-tagging: TAGGING_NAMES must be 1, 2 or 3" >&2; exit 1 ;; esac

# A DEMO passphrase in the environment, for an unattended demo only: a real
# library takes its passphrase from the no-echo prompt or a key file (mode
# 0600), since other programs of the same user can read the environment.
# For the same reason Argon2id runs at a low cost here (the passphrase is
# public anyway); veil library init's defaults cost about a second per unlock.
export VEIL_PASSPHRASE=${VEIL_DEMO_PASSPHRASE:-veil demo library, not a secret}
export VEIL_LIBRARY=out/library
unset VEIL_NEW_PASSPHRASE

start=$(date +%s)
mkdir -p out
photos=out/library-photos
rm -rf "$photos"
mkdir -p "$photos"
# The first 12 development test identities (alphabetically) with at least 5
# photos, and the first 8 with a single photo.
# (No "| head" here: under pipefail, awk killed by SIGPIPE would stop the
# script.)
people=$(awk 'NR > 1 && $2 >= 5 && n < 12 { print $1; n++ }' "$lfw/peopleDevTest.txt")
strangers=$(awk 'NR > 1 && $2 == 1 && n < 8 { print $1; n++ }' "$lfw/peopleDevTest.txt")
img=$(cd "$lfw/images_deepfunneled" && pwd)
for p in $people; do
  for i in 1 2 3 4 5; do
    f=$(printf '%s_%04d.jpg' "$p" "$i")
    ln -s "$img/$p/$f" "$photos/$f"
  done
done
for p in $strangers; do
  ln -s "$img/$p/${p}_0001.jpg" "$photos/${p}_0001.jpg"
done
nphotos=$(find "$photos" -name '*.jpg' | wc -l)

# Reuse the library if it opens and holds exactly these photos.
if [ -e out/library/library.db ]; then
  if have=$("$veil" library status --json 2>/dev/null) &&
    [ "$(printf '%s' "$have" | tr -d ' \n' | grep -o '"photos":[0-9]*')" = "\"photos\":$nphotos" ]; then
    echo "== reusing the demo library out/library"
  else
    echo "== out/library is not this demo's library: rebuilding it"
    rm -rf out/library
  fi
fi
if [ ! -e out/library/library.db ]; then
  echo "== a new encrypted library (veil library init)"
  rm -rf out/library
  # The low cost needs the explicit test settings (veil refuses costs under
  # 3 passes over 64 MiB otherwise): this library is a demo.
  VEIL_TEST_SETTINGS=1 "$veil" library init --argon2-time 1 --argon2-memory 64 --argon2-threads 2
fi

echo "== indexing $nphotos photos: 12 people × 5 and 8 strangers (veil library add)"
"$veil" library add --json "$photos" > out/tagging-add.json
"$veil" library status

# Who is who: the "user" recognises the subject of each LFW photo, the face
# nearest the centre of the 250×250 photo, and knows the name from the file
# name. faces list's text columns: FACE PERSON BOX SCORE SOURCE PHOTO; the
# subjects are listed as "FACE FILE-NAME".
"$veil" faces list > out/tagging-faces.txt
subjects=$(awk 'NR > 1 && NF >= 6 && $1 ~ /^[0-9]+$/ {
    n = split($6, parts, "/"); f = parts[n]
    split($3, b, ","); dx = b[1] + b[3] / 2 - 125; dy = b[2] + b[4] / 2 - 125; d = dx * dx + dy * dy
    if (d <= 1600 && (!(f in best) || d < best[f])) { best[f] = d; face[f] = $1 }
  } END { for (f in face) print face[f], f }' out/tagging-faces.txt | sort -k2)

echo "== naming $names photo(s) of each of the 12 people (veil faces name)"
for p in $people; do
  ids=
  for i in $(seq 1 "$names"); do
    f=$(printf '%s_%04d.jpg' "$p" "$i")
    id=$(printf '%s\n' "$subjects" | awk -v f="$f" '$2 == f { print $1 }')
    if [ -n "$id" ]; then ids="$ids $id"; fi
  done
  if [ -z "$ids" ]; then
    echo "no face found at the centre of ${p}'s first photos: not named" >&2
    continue
  fi
  # shellcheck disable=SC2086 # ids is a list of numbers
  "$veil" faces name $ids --person "${p//_/ }"
done

echo "== people (veil people list)"
"$veil" people list
"$veil" people list --json > out/tagging-people.json

echo "== clusters of unnamed faces, two faces or more (veil faces clusters)"
"$veil" faces clusters --min-size 2
"$veil" faces clusters --json > out/tagging-clusters.json

echo "== suggestions (veil suggest)"
"$veil" suggest --json > out/tagging-suggestions.json
"$veil" suggest > out/tagging-suggestions.txt
cat out/tagging-suggestions.txt
echo "== review queue (veil suggest --review)"
"$veil" suggest --review
"$veil" library status --json > out/tagging-status.json

# Suggestions checked against the file names: right, wrong, and strangers'
# faces that received one (the library never heard of them).
summary=$(printf '%s\n' "$subjects" | awk -v names="$names" -v strangers="$(echo $strangers)" '
  FNR == NR { f = $2; sub(/_[0-9]+\.jpg$/, "", f); who[$1] = f; next }
  $1 == "face" {
    id = $2; sub(/:$/, "", id); name = ""
    for (i = 3; i <= NF && $i !~ /^\(distance$/; i++) name = name (name == "" ? "" : "_") $i
    n++
    if (!(id in who)) { other++; next }
    if (index(" " strangers " ", " " who[id] " ")) { stranger++; next }
    if (who[id] == name) right++; else wrong++
  }
  END {
    s = split(strangers, x, " ")
    printf "{\"people\": 12, \"photos_named_per_person\": %d, \"unnamed_photos_of_named_people\": %d, \"strangers\": %d, ", names, 12 * (5 - names), s
    printf "\"suggestions\": %d, \"right\": %d, \"wrong\": %d, \"strangers_suggested\": %d, \"other_faces_suggested\": %d}\n", n, right, wrong, stranger, other
  }' - out/tagging-suggestions.txt)
printf '%s\n' "$summary" > out/tagging-summary.json
echo "== suggestions checked against LFW's file names"
echo "$summary"
echo "tagging demo: out/library, out/tagging-*.json ($(($(date +%s) - start)) s)"

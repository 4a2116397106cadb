#!/usr/bin/env bash
# The test command (README, .ci/run): installs what the tests need (Go
# modules, the pinned face-api model package, the linter), checks formatting,
# runs go vet and staticcheck, then every test. Needs ../shared/data beside the
# checkout (or VEIL_DATA) for the tests that use real data.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export GOEXPERIMENT=simd GOFLAGS=-buildvcs=false

echo "== installing models and tools" >&2
scripts/install-models.sh
go mod download
GOBIN="$top/.tools/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.7.0

echo "== gofmt" >&2
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './models/*') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" >&2; echo "$unformatted" >&2; exit 1
fi
echo "== go vet" >&2
go vet ./...
echo "== staticcheck" >&2
"$top/.tools/bin/staticcheck" ./...
echo "== go test" >&2
go test -count=1 -timeout 14m "$@" ./...

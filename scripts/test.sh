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
# The web app's end-to-end test (serve.TestBrowser) drives headless Chromium:
# Debian's chromium package, installed when missing. The test fails, not
# skips, without it.
scripts/install-chromium.sh
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

# GoMLX takes an AVX-512 path where the CPU has one, and results may differ
# in the last bits from the AVX2 path: every test must pass on both kinds of
# machine. On an AVX-512 machine, run the packages that link GoMLX again with
# its AVX-512 path off (GOMLX_SIMD_AVX512=off), so one CI run checks both.
# VEIL_TEST_AVX2_PASS=0 skips the second pass (it adds about 3 minutes).
if [ "${VEIL_TEST_AVX2_PASS:-1}" != 0 ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "== go test, GoMLX's AVX-512 path off (this CPU has AVX-512)" >&2
  # The test binaries (pkg.test) whose dependencies include GoMLX.
  gomlx_pkgs=$(go list -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... |
    awk '$1 ~ /\.test$/ && /github.com\/gomlx\// {sub(/\.test$/, "", $1); print $1}')
  GOMLX_SIMD_AVX512=off go test -count=1 -timeout 14m "$@" $gomlx_pkgs
fi

#!/usr/bin/env bash
# Regenerates fed/fedpb from fed/fedpb/fed.proto with pinned generators:
# Debian's protobuf compiler 3.21.12 and protoc-gen-go / protoc-gen-go-grpc at
# the exact versions below. With --check it regenerates into a temporary
# folder and fails if the committed code differs.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
protoc_version=3.21.12
gen_go=v1.36.10
gen_grpc=v1.5.1

if ! command -v protoc >/dev/null || [ "$(protoc --version)" != "libprotoc $protoc_version" ]; then
  echo "gen-proto: installing Debian's protobuf-compiler $protoc_version" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "protobuf-compiler=${protoc_version}-*" >/dev/null
fi
if [ "$(protoc --version)" != "libprotoc $protoc_version" ]; then
  echo "gen-proto: need protoc $protoc_version, have $(protoc --version)" >&2
  exit 1
fi
bin="$top/.tools/bin"
mkdir -p "$bin"
GOBIN="$bin" GOFLAGS=-buildvcs=false go install "google.golang.org/protobuf/cmd/protoc-gen-go@$gen_go"
GOBIN="$bin" GOFLAGS=-buildvcs=false go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$gen_grpc"

out=fed/fedpb
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
PATH="$bin:$PATH" protoc -I fed/fedpb \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  fed/fedpb/fed.proto
if [ "${1:-}" = "--check" ]; then
  for f in fed.pb.go fed_grpc.pb.go; do
    if ! cmp -s "$out/$f" "fed/fedpb/$f"; then
      echo "gen-proto: fed/fedpb/$f is not what the pinned generators make from fed.proto; run scripts/gen-proto.sh" >&2
      exit 1
    fi
  done
  echo "gen-proto: generated code is up to date" >&2
fi

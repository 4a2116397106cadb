#!/usr/bin/env bash
# Regenerates fed/fedpb from fed/fedpb/fed.proto and fed/keygenpb from
# fed/keygenpb/keygen.proto with pinned generators:
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

# gen DIR FILE: generate DIR/FILE.proto's Go code into OUT/DIR.
gen() {
  local dir=$1 file=$2 dst=$out/$1
  mkdir -p "$dst"
  PATH="$bin:$PATH" protoc -I "$dir" \
    --go_out="$dst" --go_opt=paths=source_relative \
    --go-grpc_out="$dst" --go-grpc_opt=paths=source_relative \
    "$dir/$file.proto"
  if [ "$check" = 1 ]; then
    for f in "$file.pb.go" "${file}_grpc.pb.go"; do
      if ! cmp -s "$dst/$f" "$dir/$f"; then
        echo "gen-proto: $dir/$f is not what the pinned generators make from $file.proto; run scripts/gen-proto.sh" >&2
        exit 1
      fi
    done
  fi
}

out=.
check=0
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d)
  check=1
  trap 'rm -rf "$out"' EXIT
fi
gen fed/fedpb fed
gen fed/keygenpb keygen
if [ "$check" = 1 ]; then
  echo "gen-proto: generated code is up to date" >&2
fi

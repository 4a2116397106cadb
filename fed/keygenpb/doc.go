// Package keygenpb holds the generated protobuf messages and gRPC service of
// Veil's DPHE key-generator protocol (keygen.proto). Do not edit the
// generated files: change keygen.proto and run scripts/gen-proto.sh, which
// pins the generators.
package keygenpb

// ProtocolVersion is the version of the key-generator protocol this build
// speaks; every message carries it and a peer refuses any other.
const ProtocolVersion = 1

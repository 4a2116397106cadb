// Package fedpb holds the generated protobuf messages and gRPC service of
// Veil's federation protocol (fed.proto). Do not edit the generated files:
// change fed.proto and run scripts/gen-proto.sh, which pins the generators.
package fedpb

// ProtocolVersion is the version of the federation protocol this build
// speaks; every message carries it and a peer refuses any other.
const ProtocolVersion = 1

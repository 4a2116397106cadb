package secround

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/veil-privacy/veil/fed/fedpb"
)

// contextLabel starts what RoundContext hashes.
const contextLabel = "veil/fed/secround/v1 round context\x00"

// ModelDigest parses a model version (fed/wire.Version: the hex SHA-256
// of a model's header, whose own SHA-256 field covers its payload) into
// the 32 bytes RoundContext binds. A client passes the version it
// computes over the model bytes it received and will train on, never the
// one the coordinator states; the coordinator passes the version it
// serves for the round.
func ModelDigest(version string) ([32]byte, error) {
	var d [32]byte
	b, err := hex.DecodeString(version)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("model version %.16q is not a hex SHA-256", version)
	}
	copy(d[:], b)
	return d, nil
}

// RoundContext is what a round's masking parameters bind in
// masking.Params.Context: SHA-256 of a label, the configuration's digest
// (ConfigDigest) and the digest of the model the round trains from
// (ModelDigest). Two clients given different configurations or different
// models (the coordinator served them different weights in one round)
// sign different contexts and refuse each other's key adverts.
func RoundContext(cfg *fedpb.SecAggConfig, model [32]byte) [32]byte {
	cd := ConfigDigest(cfg)
	b := make([]byte, 0, len(contextLabel)+64)
	b = append(b, contextLabel...)
	b = append(b, cd[:]...)
	return sha256.Sum256(append(b, model[:]...))
}

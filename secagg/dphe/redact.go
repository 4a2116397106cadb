package dphe

import (
	"fmt"
	"io"
)

// String describes the user keys without their permutations, MAC and tag
// keys or checksum secrets.
func (k *UserKeys) String() string {
	return fmt.Sprintf("dphe.UserKeys{round: %d, user: %d, dim: %d, capacity: %d, secrets: [REDACTED]}", k.Round, k.UserID, k.Dim, k.Capacity)
}

// GoString redacts like String.
func (k *UserKeys) GoString() string { return k.String() }

// Format redacts the secrets for every verb.
func (k *UserKeys) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, k.String()) }

// Zero overwrites the permutations, the MAC and tag keys and the checksum
// secrets. The keys are unusable afterwards. Copies elsewhere in memory are
// out of reach.
func (k *UserKeys) Zero() {
	clear(k.Phi)
	clear(k.PhiUser)
	clear(k.MACKey[:])
	clear(k.TagKey[:])
	clear(k.ChecksumKey[:])
	if k.ChecksumOffset != nil {
		clear(k.ChecksumOffset.Bits())
		k.ChecksumOffset.SetInt64(0)
	}
}

// String describes the aggregator keys without permutations or MAC keys.
func (k *AggregatorKeys) String() string {
	return fmt.Sprintf("dphe.AggregatorKeys{round: %d, users: %d, dim: %d, capacity: %d, secrets: [REDACTED]}", k.Round, len(k.Users), k.Dim, k.Capacity)
}

// GoString redacts like String.
func (k *AggregatorKeys) GoString() string { return k.String() }

// Format redacts the secrets for every verb.
func (k *AggregatorKeys) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, k.String()) }

// Zero overwrites the permutations and MAC keys.
func (k *AggregatorKeys) Zero() {
	for id, u := range k.Users {
		clear(u.PhiUser)
		clear(u.MACKey[:])
		k.Users[id] = u
	}
}

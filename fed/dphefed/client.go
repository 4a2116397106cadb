package dphefed

import (
	"context"
	"errors"
	"fmt"

	"github.com/veil-privacy/veil/secagg/dphe"
	"github.com/veil-privacy/veil/secagg/paillier"
)

// ContributeOptions configures a client's contribution.
type ContributeOptions struct {
	// Privacy is the client's own DP release (required; its owner's: the
	// clip, noise multiplier, selection, ledger and principal). Nothing
	// the key generator or the coordinator sends changes it.
	Privacy *dphe.Privacy
	// Encrypter configures Paillier encryption.
	Encrypter paillier.EncrypterOptions
}

// Contribution is a client's encrypted update for the coordinator.
type Contribution struct {
	Round uint64
	// UserID is the client's identifier in the round.
	UserID uint32
	// Messages are dphe messages (binary encodings) for the coordinator.
	Messages [][]byte
}

// Contribute fetches the client's keys for round from the key generator,
// releases update under the client's Privacy (charging its ledger before
// any noise is drawn; a refused charge sends nothing) and encrypts it.
// Only ciphertexts, doubly-permuted positions, the checksum and the tags
// leave the client.
func Contribute(ctx context.Context, kg *KeyGen, round uint64, update []float64, o ContributeOptions) (*Contribution, error) {
	if o.Privacy == nil {
		return nil, errors.New("dphefed: a contribution needs the client's Privacy")
	}
	keys, err := kg.UserKeys(ctx, round)
	if err != nil {
		return nil, err
	}
	defer keys.Zero()
	u, err := dphe.NewUser(keys, dphe.UserOptions{Encrypter: o.Encrypter, Privacy: o.Privacy})
	if err != nil {
		return nil, fmt.Errorf("dphefed: round %d: %w", round, err)
	}
	msgs, err := u.Encrypt(update)
	if err != nil {
		return nil, fmt.Errorf("dphefed: round %d: %w", round, err)
	}
	return &Contribution{Round: round, UserID: keys.UserID, Messages: msgs}, nil
}

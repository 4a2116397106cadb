// Package dphe implements doubly-permuted homomorphic encryption (DPHE;
// Yonetani et al., "Privacy-Preserving Visual Learning Using Doubly Permuted
// Homomorphic Encryption", Algorithm 1 and Sections 2.3–2.5) for summing
// sparse updates that the aggregator cannot read, hardened so that a
// malicious aggregator cannot make the key generator decrypt anything but
// the complete sum of at least three users' updates, once per round, and
// with each update differentially private on its own (Privacy), since the
// key generator reads the sum.
//
// Three roles, each a type:
//
//   - KeyGenerator holds the Paillier private key and, per round, draws the
//     user-shared permutation φ and one user–aggregator permutation φ⁽ⁿ⁾ per
//     user (index arrays from a CSPRNG, never D×D matrices), the capacity M,
//     a MAC key per user shared with the aggregator, and, shared with the
//     users only, a tag key per user, a checksum key for the round and a
//     secret checksum offset t per user. It hands UserKeys to each user and
//     AggregatorKeys to the aggregator, and later decrypts and reorders only
//     an authenticated aggregate.
//   - User first releases its update with its own differential-privacy
//     noise (Privacy, required: clip to L2 norm C, exact discrete Gaussian
//     noise of standard deviation σC on every coordinate, charged to the
//     user's dp.Ledger before anything is drawn; optionally a threshold
//     that zeroes small noisy coordinates to keep the update sparse). It
//     then decomposes the noisy update w into its non-zero values v and their
//     support K, shards it when it has more than M non-zeros, pads every
//     shard to exactly M entries with encryptions of zero at random unused
//     positions (so the aggregator does not learn the number of non-zeros),
//     encrypts v and sends the doubly-permuted support φ⁽ⁿ⁾(φ(K)), sorted so
//     that the order carries no information. Each message also carries an
//     encrypted checksum share and a tag for the key generator.
//   - Aggregator undoes φ⁽ⁿ⁾, places each ciphertext at its φ-position,
//     fills positions a message does not cover with one encryption of zero
//     computed once (Eq. 5–6), multiplies across messages (Eq. 4), and sends
//     the permuted encrypted sum φζ(w_sum), the product of the checksum
//     ciphertexts and every message's tag (with the SHA-256 of the message
//     it covers) to the key generator. It refuses to produce a sum of fewer
//     than MinUsers = 3 users (Section 2.5).
//
// # Authentication
//
// Every user message carries a version, the fingerprint of the Paillier
// key, the round, the user, the shard index and count, and an HMAC-SHA256
// under a key shared only by that user and the aggregator, so replayed,
// reordered, truncated, forged or foreign-key messages are rejected with a
// clear error. The aggregator checks a message's structure and ranges
// without arithmetic, then its MAC, and only then does modular arithmetic
// (the coprimality test); nil or missing ciphertexts are errors, never
// panics. Permutations and keys are drawn afresh for every round: reusing φ
// across rounds would let the aggregator link a user's support pattern
// between rounds.
//
// The paper assumes a semi-honest aggregator: it "is not allowed to ask the
// key generator to decrypt individual classifier φζ(w⁽ⁿ⁾)". This package
// does not assume it. The key generator decrypts an aggregate only if
//
//  1. every message it names carries a valid tag: HMAC-SHA256, under a key
//     only the user and the key generator hold, of the key fingerprint, the
//     round, the user, the shard, the shard count and the SHA-256 of the
//     message body (compared with hmac.Equal), from at least MinUsers
//     distinct users of the round, each with all of its shards — so a
//     user list cannot be invented, an aggregate cannot be moved to another
//     round, and a user's update cannot be partly counted;
//  2. the round is open: rounds are set up in increasing order, a round is
//     closed before its decryption starts (also when that decryption is then
//     refused), and at most MaxOpenRounds rounds are held, the oldest
//     expiring first, so finished rounds need no memory and no round is
//     decrypted twice (two sums over different subsets could be subtracted);
//  3. after decryption, before anything is released, the checksum holds:
//     Σ_{u ∈ users} t_u + Σ_j α_j·S_j ≡ T (mod n), where S is the decrypted
//     sum in original coordinates, T the decrypted product of the checksum
//     ciphertexts, and α_j are 128-bit coefficients derived from the round's
//     checksum key. Each user encrypts, per shard, a share of t_u (the shares
//     add up to t_u) plus Σ α_j·m_j over the shard's non-zeros m_j.
//
// Checks 1 and 2 cost a few hashes and run before any decryption; a failure
// leaves the round open. The checksum binds the sum to exactly the named
// messages: an aggregator that knows neither α nor the offsets (it sees
// them only inside Paillier ciphertexts) can compute homomorphically any
// linear combination of the users' ciphertexts, but the identity holds for
// all offsets and α only when each named user's checksum is counted once
// (the offsets are uniform in Z_n) and S_j is exactly the sum of the named
// users' values at every coordinate (α is uniform over 128 bits and each
// prime factor of n exceeds 2^128 at the 2048-bit minimum), so a forged
// aggregate passes with probability at most 2^-127. Forged aggregates in
// every form the adversary tests try — one user's ciphertexts labelled as
// three, the other users cancelled by subtracting their ciphertexts, a
// coordinate shifted, two positions swapped, a user counted twice, a round
// replayed — are refused.
//
// # Differential privacy of each contribution
//
// Secure aggregation hides an update from the aggregator, not from the
// key generator, which decrypts the sum: "at least three users" protects
// no one when the other users' contributions are known to it (users who
// send zeros, send the same update in two rounds, or collude with the key
// generator), since the sum minus them is the victim's update. So every
// contribution carries its own noise (Privacy) and is, alone, a Gaussian
// mechanism with the ε its ledger charges, whatever the others send: the
// noise is not shared out among the users (as in distributed DP, where
// each adds a fraction), because the others may add none.
// TestColludersLearnOnlyNoisyUpdate plays two colluders sending zeros
// and finds, in the decrypted sum, the victim's clipped update plus noise
// of standard deviation σC; TestColludersCannotTellVictimsUpdate shows
// their best test between two updates at the Gaussian's accuracy, where
// without noise it is always right. The noise makes updates dense unless
// Privacy.Threshold zeroes small noisy coordinates (post-processing,
// free); the number of shards ⌈nz/M⌉ then depends on the noisy release
// only, so it is covered by the same guarantee.
//
// # Rounds from a seed, restarts, packing and selection
//
// Every secret of a round (φ, each user's φ⁽ⁿ⁾, MAC and tag keys and
// checksum offset, the checksum key) derives from one 32-byte seed drawn
// from the key generator's CSPRNG (HMAC-SHA256 subkeys, ChaCha8 streams),
// so a key generator that keeps its Snapshot (the seeds of the open rounds
// and the last round set up) hands out the same keys after a restart
// (KeyGeneratorOptions.Resume), and KeyGeneratorOptions.BeforeDecrypt lets
// it record a round as finished, durably, before anything is decrypted.
//
// Packing (as BatchCrypt) puts several fixed-point values in one
// plaintext, each lane wide enough for the sum of Packing.MaxUsers users'
// values clamped to ±Packing.Bound; DPHE then permutes and sums blocks of
// Lanes coordinates. Privacy.Select replaces the threshold by a DP
// selection of blocks (Irene's sparse vector, charged), with the noise on
// the selected coordinates only (see Selection).
//
// # What each party can and cannot learn
//
// Users (semi-honest, non-colluding with the aggregator, as in the paper)
// learn φ, the checksum key and their own φ⁽ⁿ⁾ and offset, and the published
// mean. They cannot read other users' ciphertexts or, lacking φ⁽ⁿ⁾, map
// another user's positions back to coordinates.
//
// The aggregator sees every message: ciphertexts, which reveal nothing
// under the decisional composite residuosity assumption (the checksum
// shares included), and, after undoing φ⁽ⁿ⁾, the φ-permuted positions of
// each message's M entries, whose distribution does not depend on the
// user's support. It does learn how the users' permuted supports overlap,
// the number of shards ⌈nz/M⌉ of each user, and the published sum. It
// cannot obtain a decryption of anything other than the complete sum of at
// least three users' updates as they encrypted them, nor a second
// decryption of a round, nor a decryption in another round; a refused
// forgery teaches it only the refusal. It can always deny service (refuse
// to aggregate, or spend a round on a forgery).
//
// The key generator holds the private key, φ and every φ⁽ⁿ⁾, but never
// receives a user's ciphertexts: it sees the aggregate (ciphertexts of
// sums), the product of the checksums, the tags with the message digests,
// and so which users took part and the number of shards of each (⌈nz/M⌉,
// which the aggregator also sees). It decrypts the sum of at least three
// users' complete noisy contributions once per round, as in the paper,
// and learns about any one user no more than that user's own noise allows
// (see above), even if it knows every other contribution. One residue
// remains, outside the paper's model: it must decrypt before it can test
// the checksum, so when a malicious aggregator submits a forgery (say one
// user's ciphertexts under three users' tags) the key generator computes
// that forged plaintext internally before refusing it. It is never
// released or returned (the buffers are overwritten), so this matters only
// if the key generator itself is curious and records what it refuses,
// that is, if a cheating aggregator and a curious key generator act
// together, which the paper's non-collusion assumption excludes.
//
// A user colluding with the aggregator already breaks DPHE's index privacy
// (they share φ and every φ⁽ⁿ⁾); they can also forge checksums (the user
// knows α), so the forgery checks assume users do not collude with the
// aggregator, as the paper does. A malicious user can spoil a round by
// sending a wrong checksum share; the round is then refused, not
// mis-summed.
package dphe

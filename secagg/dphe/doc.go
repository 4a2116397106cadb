// Package dphe implements doubly-permuted homomorphic encryption (DPHE;
// Sakai et al., "Privacy-Preserving Visual Learning Using Doubly Permuted
// Homomorphic Encryption", Algorithm 1 and Sections 2.3–2.5) for summing
// sparse updates that the aggregator cannot read.
//
// Three roles, each a type:
//
//   - KeyGenerator holds the Paillier private key and, per round, draws the
//     user-shared permutation φ and one user–aggregator permutation φ⁽ⁿ⁾ per
//     user (index arrays from a CSPRNG, never D×D matrices), and the
//     capacity M. It hands UserKeys to each user and AggregatorKeys to the
//     aggregator, and later decrypts and reorders only the aggregate.
//   - User decomposes a sparse update w into its non-zero values v and their
//     support K, shards it when it has more than M non-zeros, pads every
//     shard to exactly M entries with encryptions of zero at random unused
//     positions (so the aggregator does not learn the number of non-zeros),
//     encrypts v and sends the doubly-permuted support φ⁽ⁿ⁾(φ(K)), sorted so
//     that the order carries no information.
//   - Aggregator undoes φ⁽ⁿ⁾, places each ciphertext at its φ-position,
//     fills positions a message does not cover with one encryption of zero
//     computed once (Eq. 5–6), multiplies across messages (Eq. 4) and sends
//     the permuted encrypted sum φζ(w_sum) to the key generator. It refuses
//     to produce a sum of fewer than MinUsers = 3 users (Section 2.5).
//
// Beyond the paper, every user message carries a version, the fingerprint of
// the Paillier key, the round, the user, the shard index and count, and an
// HMAC-SHA256 under a key shared only by that user and the aggregator
// (issued with φ⁽ⁿ⁾), so replayed, reordered, truncated, forged or
// foreign-key messages are rejected with a clear error. Permutations are
// drawn afresh for every round: reusing φ across rounds would let the
// aggregator link a user's support pattern between rounds.
//
// What each party learns (semi-honest, non-colluding parties, as in the
// paper): the aggregator sees ciphertexts and, after undoing φ⁽ⁿ⁾, the
// φ-permuted positions of each message's M entries, whose distribution does
// not depend on the user's support; it does learn how the users' permuted
// supports overlap, and the number of shards ⌈nz/M⌉. The key generator sees
// only the aggregate ciphertexts of at least three users and decrypts each
// round once.
package dphe

// Package masking is masking secure aggregation in the style of SecAgg+
// (Bell, Bonawitz, Gascón, Lepoint & Raykova 2020; Bonawitz et al. 2017):
// the coordinator learns the sum modulo 2^32 of the surviving clients'
// vectors and nothing else about any honest client's vector. It is a pair
// of state machines over messages, with no network: the federation relays
// the messages (each has a binary encoding with length checks).
//
// # Protocol and API
//
//	p := masking.Params{RoundID, Roster, Degree k, Threshold t, Length, GraphSeed}
//	srv, _ := masking.NewServer(p, keys)                   // keys: KeyDirectory (mTLS certificates)
//	c, ad, _ := masking.NewClient(cfg, p, rand)            // 1. two X25519 keys, advert signed by cfg.Signer
//	srv.ReceiveAdvert(ad); ads, _ := srv.AdvertsFor(id)
//	shares, _ := c.ShareKeys(ads, rand)                    // 2. verify neighbours' adverts; Shamir-share the
//	srv.ReceiveShares(id, shares); in, _ := srv.SharesFor(id) //  self-mask seed and mask key (AEAD per neighbour)
//	m, _ := c.MaskInput(in, x)                             // 3. y = x + PRG(b) + Σ ±PRG(s_ij) mod 2^32
//	srv.ReceiveMasked(m); req, _ := srv.UnmaskRequest()    //    (fewer than t inputs: ErrTooFewSurvivors)
//	resp, _ := c.Unmask(req); srv.ReceiveUnmask(resp)      // 4. seed shares of survivors, key shares of the dropped
//	res, _ := srv.Sum()                                    //    Σ survivors' x, mod 2^32
//
// The graph is a k-regular Harary graph on the roster in an order drawn
// from GraphSeed (complete when k ≥ n − 1); each client's secrets are
// shared among its neighbours and itself, threshold t. The graph is
// k-vertex-connected whatever the seed, so Params.SeedIndependent can say
// when c colluders are tolerated wherever they sit: a caller whose seed
// comes from the coordinator (which could grind it) checks it. Pairwise seeds are
// HKDF-SHA256 of the X25519 secret, bound to the round and the pair; the
// PRG is ChaCha20; shares travel under ChaCha20-Poly1305 keyed by
// HKDF(X25519) bound to round, sender and recipient; Shamir is over
// GF(2^61 − 1) with a 32-byte secret in five chunks. Every draw comes from
// the io.Reader passed in (crypto/rand in production).
//
// # Security argument, in brief
//
// A masked input is the input plus PRG(b) for a fresh self-mask seed b,
// so alone it is pseudorandom. The coordinator removes b only with t
// shares of it, which honest clients give only for clients listed as
// survivors; it removes a pairwise mask only with t shares of a mask key,
// given only for clients listed as dropped. An honest client answers one
// unmasking request per round and refuses one naming a client as both,
// naming itself dropped, or listing fewer than t survivors; and since
// 2t > k + 1, no split of the k + 1 honest holders gives t shares of both
// secrets of one client. With fewer than t holders answering, the t − 1
// shares held are consistent with every secret (Shamir is perfectly
// hiding). Key advertisements are signed by the client's long-term key
// over the round id and the digest of Params, Params.Context included
// (the caller's digest of the rest of its round configuration), and carry
// that digest, so the coordinator can neither substitute keys (a man in
// the middle on the pairwise masks) nor give clients different parameters
// or configurations: a client refuses a neighbour's advertisement made
// under another digest (ErrParamsMismatch) before it sends anything but
// its own advertisement, so the inputs whose masks cancel together were
// all produced under one configuration. Shares are bound to round, sender
// and recipient by the AEAD, and every duplicate or replay is refused.
// CheckShares lets a caller check the relayed shares before it commits
// to anything (a privacy charge) and computes its input.
//
// Assumed: the key directory maps each client id to that client's own
// key (the PKI is honest); RoundID is fresh and random per round; the
// coordinator may deviate arbitrarily but colludes with at most
// Params.ToleratedColluders of any client's neighbours (each colluder
// hands over both kinds of share), and the honest clients' subgraph is
// connected (a client whose neighbours all collude is exposed by its
// pairwise seeds; always true for k = n − 1 and for fewer than k
// colluders, with high probability for SecAgg+'s k ≈ log n on a random
// graph when colluders are a bounded fraction, which needs GraphSeed
// random and not chosen by a coordinator that knows the colluders);
// X25519, HKDF-SHA256, ChaCha20 and
// ChaCha20-Poly1305 are secure. Not provided: robustness against a
// coordinator that corrupts the sum (it can always make the round fail or
// the result wrong, never reveal an honest input), and SecAgg's signed
// consistency round, which would let t be lower against colluders.
package masking

// Package training is one training run of a face-embedding model: the
// code veil train, a federated client and the simulation share.
//
// A Job (New, then Run) is what veil train does: read LFW's development
// training identities (or MTFL's public faces), compute what the model
// reads (image crops for LightFace; for the embedding head, vectors from
// describers the caller passes in, such as the face pipeline's cached
// descriptors), train with or without DP-SGD, save a checkpoint after
// every epoch and score the development pairs. Progress goes to a
// callback; there is no global state.
//
// A Session is the unit underneath: a model, its loss head and a trainer
// over one data set. A federated client builds one on its partition and
// calls Local: weights in, E epochs (each charged to the client's ledger
// before it runs), weights and privacy out.
//
// # Privacy
//
// The privacy unit is the identity by default: neighbouring data sets
// differ by all the images of one person, N is the number of people and q
// the rate at which each person is sampled. The example unit (one image)
// is for experiments that need it. Every reported ε names its unit.
//
// A run under DP keeps a privacy ledger beside its checkpoint
// (LedgerPath): package dp's Ledger with the budget and every charge,
// written atomically and durably. Each epoch is charged, and the ledger
// saved, before the epoch touches the data, so a crash can lose a step but
// never a charge. A run whose epochs would exceed the budget is refused
// before anything is written (ErrBudget); a resumed checkpoint whose
// ledger is missing, damaged, kept at another δ or records less than the
// checkpoint has spent is refused; weights a ledger accounts for may not
// be trained further without DP. The ledger bounds one lineage of weights
// (a run and the runs resumed from it); a new run written over the
// checkpoint starts a new lineage and a new ledger.
package training

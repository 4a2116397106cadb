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
// A run under DP charges the privacy ledger of its data set (dp.DataLedger
// in the ledger folder Options.LedgerDir, shared with every other command
// that spends on the same people), for the members it trains on: its
// people, or its images under the example unit. Each epoch is charged,
// and the ledger saved, before the epoch touches the data, so a crash can
// lose a step but never a charge. A run whose epochs would take one of its
// members past the budget is refused before anything is written
// (ErrBudget); so is a resumed checkpoint whose spending the ledger does
// not cover (no ledger, another δ, less ε: a reset or another folder),
// and training a DP checkpoint further without DP. Writing the output
// elsewhere, copying the checkpoint or the data folder does not give a
// fresh budget: the ledger is the data set's, not the output's.
package training

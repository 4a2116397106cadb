// Package eval scores face verification the way LFW's protocol does:
// k-fold accuracy with thresholds chosen on the other folds, ROC AUC, equal
// error rate and true-accept rate at fixed false-accept rates, over the
// pairs that package dataset reads.
package eval

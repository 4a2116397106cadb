// Package eval scores face verification the way LFW's protocol does:
// k-fold accuracy with thresholds chosen on the other folds, ROC AUC, equal
// error rate and true-accept rate at fixed false-accept rates, over the
// pairs that package dataset reads.
//
// It also holds the benchmarks' protocols that the commands and other
// callers run: the detectors' recall (DetectBench, veil bench detect), the
// linkage attack across libraries and the learned metric's gain on LFW's
// development identities (MeasureLinkageLFW, MeasureMetricGainLFW: veil
// bench unlink and metric), and LFWSource, the described LFW people those
// benchmarks and package tagging/tagbench share.
package eval

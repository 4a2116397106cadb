// Package cputime reads the processor time the process has used, for
// benchmarks and measurements that report CPU time next to wall time: a
// shared, loaded machine stretches wall time but not the processor time a
// piece of work needs.
package cputime

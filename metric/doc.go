// Package metric learns a face library's own distance (Irene, Section III.B).
package metric

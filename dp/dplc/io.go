package dplc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// MaxFileBytes bounds the size of a centres file ReadCentres accepts.
const MaxFileBytes = 1 << 30

// ReadCentres parses a centres file: a JSON array of equal-length arrays of
// finite numbers, one per class centre, e.g. [[0.1, 0.2], [0.3, -0.4]].
// It refuses empty input, ragged rows, non-numbers, non-finite values and
// rows that are zero in float32 (CheckCentres).
func ReadCentres(r io.Reader) ([][]float32, error) {
	dec := json.NewDecoder(io.LimitReader(r, MaxFileBytes))
	var rows [][]float64
	if err := dec.Decode(&rows); err != nil {
		return nil, fmt.Errorf("not a file of class centres (want a JSON array of arrays of numbers): %w", err)
	}
	if dec.More() {
		return nil, errors.New("class centres: trailing data after the array")
	}
	if len(rows) == 0 {
		return nil, errors.New("class centres: the array is empty")
	}
	d := len(rows[0])
	if d == 0 {
		return nil, errors.New("class centres: centre 0 is empty")
	}
	out := make([][]float32, len(rows))
	for i, row := range rows {
		if len(row) != d {
			return nil, fmt.Errorf("class centres: centre %d has %d values, want %d", i, len(row), d)
		}
		out[i] = make([]float32, d)
		for j, v := range row {
			f := float32(v)
			if math.IsInf(float64(f), 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("class centres: centre %d value %d is out of float32 range", i, j)
			}
			out[i][j] = f
		}
	}
	if err := CheckCentres(out); err != nil {
		return nil, fmt.Errorf("class centres: %w", err)
	}
	return out, nil
}

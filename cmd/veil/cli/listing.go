package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// writeJSONList writes the --json output of a listing command,
// {"key": [...]}, each item as conv makes it: no items give [], never null.
func writeJSONList[T, J any](w io.Writer, key string, items []T, conv func(T) J) error {
	list := make([]J, 0, len(items))
	for _, it := range items {
		list = append(list, conv(it))
	}
	return writeJSON(w, map[string][]J{key: list})
}

// writeTable writes the plain output of a listing command: header and a
// line per item (row gives its tab-separated cells), aligned in columns,
// then the line count ("3 faces").
func writeTable[T any](w io.Writer, header string, items []T, row func(T) string, count string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, count)
	return nil
}

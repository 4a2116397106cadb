package training

import (
	"fmt"
	"slices"

	"github.com/veil-privacy/veil/dataset"
)

// partImages keeps the images of the identities in part p of the split of
// images' identities, numbered by sorted name as dataset.Load and
// dataset.NewVectors label them, in their order.
func partImages(images []dataset.Image, p DataPart) ([]dataset.Image, error) {
	var names []string
	seen := map[string]bool{}
	for _, im := range images {
		if !seen[im.Identity] {
			seen[im.Identity] = true
			names = append(names, im.Identity)
		}
	}
	slices.Sort(names)
	parts, err := dataset.PartitionIdentities(len(names), p.Options)
	if err != nil {
		return nil, err
	}
	if p.Index < 0 || p.Index >= len(parts) {
		return nil, fmt.Errorf("part %d of %d", p.Index, len(parts))
	}
	keep := map[string]bool{}
	for _, id := range parts[p.Index] {
		keep[names[id]] = true
	}
	var out []dataset.Image
	for _, im := range images {
		if keep[im.Identity] {
			out = append(out, im)
		}
	}
	return out, nil
}

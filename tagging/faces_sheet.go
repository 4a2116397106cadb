package tagging

import (
	"fmt"
	"slices"

	"github.com/veil-privacy/veil/imaging"
)

// ClusterFaces returns the ids of the faces of a stored cluster (as
// UpdateClusters numbered it), in id order; an unknown cluster is an
// error.
func (l *Library) ClusterFaces(cluster int) ([]int64, error) {
	of, err := l.StoredClusters()
	if err != nil {
		return nil, err
	}
	var ids []int64
	for f, c := range of {
		if c == cluster {
			ids = append(ids, f)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no cluster %d (veil faces clusters lists the clusters)", cluster)
	}
	slices.Sort(ids)
	return ids, nil
}

// PersonFaces returns the ids of the faces assigned to the person named
// name; a person without faces is an error.
func (l *Library) PersonFaces(name string) ([]int64, error) {
	fs, err := l.Faces(FaceFilter{Person: name})
	if err != nil {
		return nil, err
	}
	if len(fs) == 0 {
		return nil, fmt.Errorf("%s has no faces", name)
	}
	ids := make([]int64, len(fs))
	for i, f := range fs {
		ids[i] = f.ID
	}
	return ids, nil
}

// ContactSheet decrypts the thumbnails of the faces ids and lays them out
// in one image, each labelled with its face id (imaging.ContactSheet). The
// sheet shows faces in the clear: the caller keeps it as it keeps the
// photos.
func (l *Library) ContactSheet(ids []int64, o imaging.SheetOptions) (*imaging.RGB, error) {
	tiles := make([]imaging.Tile, 0, len(ids))
	for _, id := range ids {
		jpg, err := l.FaceThumbnail(id)
		if err != nil {
			return nil, err
		}
		img, _, err := imaging.Decode(jpg, imaging.DefaultLimits())
		if err != nil {
			return nil, fmt.Errorf("the thumbnail of face %d: %w", id, err)
		}
		tiles = append(tiles, imaging.Tile{Image: img, Label: int(id)})
	}
	return imaging.ContactSheet(tiles, o)
}

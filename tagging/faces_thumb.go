package tagging

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrNoThumbnail is wrapped by FaceThumbnail's error for a face stored
// without a thumbnail.
var ErrNoThumbnail = errors.New("the face has no thumbnail")

// FaceThumbnail returns the JPEG thumbnail of a face (removed or not),
// unsealed: the picture a user looks at to say who the face is. An unknown
// face is ErrUnknownFace, a face stored without one ErrNoThumbnail, and a
// thumbnail that does not unseal ErrTampered.
func (l *Library) FaceThumbnail(id int64) ([]byte, error) {
	var sealed []byte
	err := l.db.QueryRowContext(context.Background(), `SELECT thumbnail FROM faces WHERE id = ?`, id).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("face %d: %w", id, ErrUnknownFace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the thumbnail of face %d: %w", id, err)
	}
	if sealed == nil {
		return nil, fmt.Errorf("face %d: %w", id, ErrNoThumbnail)
	}
	return l.Unseal("faces", "thumbnail", id, sealed)
}

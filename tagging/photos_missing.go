package tagging

import (
	"context"
	"fmt"
)

// missingPhotos returns the ids of the photos marked missing (their file
// was gone at the last scan).
func (l *Library) missingPhotos() (map[int64]bool, error) {
	rows, err := l.db.QueryContext(context.Background(), `SELECT id FROM photos WHERE missing = 1`)
	if err != nil {
		return nil, fmt.Errorf("reading missing photos: %w", err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading missing photos: %w", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading missing photos: %w", err)
	}
	return out, nil
}

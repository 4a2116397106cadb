package tagging

import (
	"context"
	"database/sql"
	"fmt"
	"sort"

	"github.com/veil-privacy/veil/tagging/cluster"
)

// NewClusterOptions returns the options of a clustering algorithm with
// the distance measured for it on the face pipeline's descriptors
// (thresholds.go).
func NewClusterOptions(a cluster.Algorithm) (cluster.Options, error) {
	o := cluster.Options{Algorithm: a, Iterations: 100, MinPoints: 1}
	switch a {
	case cluster.ChineseWhispers:
		o.Distance = ChineseWhispersDistance
	case cluster.DBSCAN:
		o.Distance, o.MinPoints = DBSCANDistance, DBSCANMinPoints
	case cluster.AverageLinkage:
		o.Distance = AverageLinkageDistance
	case cluster.CompleteLinkage:
		o.Distance = CompleteLinkageDistance
	default:
		return cluster.Options{}, fmt.Errorf("unknown clustering algorithm %q (want one of %v)", a, cluster.Algorithms)
	}
	return o, o.Validate()
}

// ClusterGroup is a cluster of unnamed faces, as stored in the clusters
// table.
type ClusterGroup struct {
	ID    int     `json:"id"`
	Faces []int64 `json:"faces"`
}

// UpdateClusters brings the library's clusters of unnamed faces up to date
// and returns them, largest first. It is incremental: faces already
// clustered keep their cluster, faces named or removed since leave theirs,
// and new unnamed faces join existing clusters or form new ones
// (cluster.Join). rebuild clusters every unnamed face afresh instead (new
// cluster ids). Clusters never name anybody: naming a cluster is the
// user's (veil faces name) or goes through AssignAuto.
func (l *Library) UpdateClusters(ctx context.Context, o cluster.Options, rebuild bool) ([]ClusterGroup, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("tagging: %w", err)
	}
	faces, err := l.Faces(FaceFilter{Unknown: true, Descriptors: true})
	if err != nil {
		return nil, err
	}
	var groups []ClusterGroup
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		stored := map[int64]int{}
		if rebuild {
			if _, err := tx.ExecContext(ctx, `DELETE FROM clusters`); err != nil {
				return err
			}
		} else {
			var err error
			if stored, err = l.readClusters(ctx, tx); err != nil {
				return err
			}
		}
		var existing, added [][]float32
		var labels []int
		var existingIDs, addedIDs []int64
		unnamed := map[int64]bool{}
		for _, f := range faces {
			if len(f.Descriptor) == 0 {
				continue
			}
			unnamed[f.ID] = true
			if c, ok := stored[f.ID]; ok {
				existing, labels, existingIDs = append(existing, f.Descriptor), append(labels, c), append(existingIDs, f.ID)
			} else {
				added, addedIDs = append(added, f.Descriptor), append(addedIDs, f.ID)
			}
		}
		for f := range stored {
			if !unnamed[f] {
				if _, err := tx.ExecContext(ctx, `DELETE FROM clusters WHERE face_id = ?`, f); err != nil {
					return err
				}
			}
		}
		var newLabels []int
		if len(added) > 0 {
			var err error
			if newLabels, err = cluster.Join(existing, labels, added, o); err != nil {
				return err
			}
		}
		for i, id := range addedIDs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO clusters (face_id, cluster) VALUES (?, ?)
				ON CONFLICT(face_id) DO UPDATE SET cluster = excluded.cluster`, id, newLabels[i]); err != nil {
				return err
			}
		}
		byCluster := map[int][]int64{}
		for i, id := range existingIDs {
			byCluster[labels[i]] = append(byCluster[labels[i]], id)
		}
		for i, id := range addedIDs {
			byCluster[newLabels[i]] = append(byCluster[newLabels[i]], id)
		}
		for c, fs := range byCluster {
			sort.Slice(fs, func(i, j int) bool { return fs[i] < fs[j] })
			groups = append(groups, ClusterGroup{ID: c, Faces: fs})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tagging: clustering faces: %w", err)
	}
	sort.Slice(groups, func(i, j int) bool {
		if len(groups[i].Faces) != len(groups[j].Faces) {
			return len(groups[i].Faces) > len(groups[j].Faces)
		}
		return groups[i].ID < groups[j].ID
	})
	return groups, nil
}

// StoredClusters returns the cluster of every face in the clusters table
// as UpdateClusters last left it, without updating it.
func (l *Library) StoredClusters() (map[int64]int, error) {
	out, err := l.readClusters(context.Background(), l.db)
	if err != nil {
		return nil, fmt.Errorf("tagging: reading clusters: %w", err)
	}
	return out, nil
}

// readClusters reads the clusters table, checking each row's MAC.
func (l *Library) readClusters(ctx context.Context, q rowQuerier) (map[int64]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT face_id, cluster, `+l.macColumn("clusters")+` FROM clusters`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var f, c int64
		var mac []byte
		if err := rows.Scan(&f, &c, &mac); err != nil {
			return nil, err
		}
		if l.authenticated {
			if err := l.checkRowMAC("clusters", []any{f, c}, mac); err != nil {
				return nil, err
			}
		}
		out[f] = int(c)
	}
	return out, rows.Err()
}

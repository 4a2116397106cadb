package tagging

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/imaging"
)

// PipelineOptions are the face pipeline settings a library indexes with:
// both detectors (face.Both: each misses faces the other finds, and SSD
// fails on most greyscale photos), both alignments averaged (face.AlignBoth,
// measured best on LFW's development pairs) and descriptors. Descriptors of
// one library must come from one setting to be comparable, so the commands
// do not offer others.
//
// These settings are nearly all of indexing's cost. On 30 LFW photos
// (250×250, 1.07 faces each) BenchmarkPipelineLFW measured, in processor
// seconds per photo on a heavily loaded 2-core machine: SSD 0.49 (it reads
// every photo at 512×512, whatever its size), tiny detector 0.13, landmarks
// and the two descriptor passes per face 0.12 (one alignment would save
// about 0.05), decoding 0.002; indexing the same photos end to end
// (BenchmarkIndexLFW) cost 0.73, and a CPU profile put hashing, EXIF,
// thumbnails, sealing and SQLite together at under 2%. Neither detector
// can be skipped without losing faces face.DefaultRule was measured to
// find (SSD alone finds 89.6% of colour and 42.8% of greyscale faces, the
// tiny detector alone 84.4% and 88.4%, both 96.5% and 94.2%), and the
// distance thresholds (thresholds.go) were chosen on descriptors of both
// alignments, so a cheaper setting needs those measured again first.
func PipelineOptions(modelDir string) face.Options {
	return face.Options{ModelDir: modelDir, Detector: face.Both, Align: face.AlignBoth, Descriptors: true}
}

// IndexOptions configure Index.
type IndexOptions struct {
	// Pipeline finds and describes faces; it must compute descriptors
	// (see PipelineOptions). face.Pipeline is safe for concurrent use, so
	// one is shared by all workers.
	Pipeline *face.Pipeline
	// Workers is how many photos are read and analysed at once (default
	// runtime.GOMAXPROCS: every core).
	Workers int
	// Limits bound the photos decoded (zero: imaging.DefaultLimits).
	Limits imaging.Limits
	// Progress, when set, is called after each file is done, from one
	// goroutine at a time.
	Progress func(IndexProgress)
	// Reading, when set, is called after each file is read and hashed
	// (the first step, before any is analysed), from one goroutine at a
	// time: a library of many photos takes a while to read.
	Reading func(done, total int)
	// Planned, when set, is called once the files are matched against
	// the library, with how many photos will be analysed (new or edited)
	// and how many files need nothing more (unchanged, moved, copies,
	// unreadable): a progress bar of the analysis starts then.
	Planned func(analyse, rest int)
	// Rehash reads and hashes every file, even those whose size,
	// modification time and inode are as recorded (see fileStamp), which
	// are otherwise taken to be unchanged without being read.
	Rehash bool
	// Waiting, when set, is called when another run is indexing the
	// library (Index waits for it to finish: see IndexLockFile), with
	// that run's pid (0 if unknown).
	Waiting func(pid int)

	// run replaces Pipeline.Run in tests of the bookkeeping, which need
	// no networks.
	run func(img *imaging.RGB) ([]face.Face, error)
	// read replaces ReadContent in tests that count the files read.
	read func(path string, maxBytes int64) (*Content, error)
}

// validate fills defaults and checks the options.
func (o *IndexOptions) validate() error {
	if o.run == nil {
		if o.Pipeline == nil {
			return errors.New("indexing: no face pipeline")
		}
		if !o.Pipeline.Options().Descriptors {
			return errors.New("indexing: the face pipeline must compute descriptors (see PipelineOptions)")
		}
		p := o.Pipeline
		o.run = func(img *imaging.RGB) ([]face.Face, error) {
			f, _, err := p.Run(img)
			return f, err
		}
	}
	if o.read == nil {
		o.read = ReadContent
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Workers < 1 || o.Workers > 256 {
		return fmt.Errorf("indexing: %d workers (want 1 to 256)", o.Workers)
	}
	if o.Limits == (imaging.Limits{}) {
		o.Limits = imaging.DefaultLimits()
	}
	return o.Limits.Validate()
}

// Outcome is what indexing did with one file.
type Outcome string

// Outcomes of indexing a file.
const (
	PhotoAdded     Outcome = "added"     // a new photo, analysed and recorded
	PhotoUnchanged Outcome = "unchanged" // already recorded with these bytes at this path
	PhotoMoved     Outcome = "moved"     // known bytes at a new path: the path was updated, faces and names kept
	PhotoDuplicate Outcome = "duplicate" // a copy of a photo recorded at another path that still holds it
	PhotoUpdated   Outcome = "updated"   // new bytes at a known path: re-analysed, the user's decisions kept
	PhotoFailed    Outcome = "failed"    // could not be read or analysed (see the reason)
)

// IndexProgress reports one file done.
type IndexProgress struct {
	Done, Total int
	Path        string
	Outcome     Outcome
	Faces       int // faces recorded for the file (Added, Updated)
	// Analysed is set for the files that were decoded and analysed (new
	// or edited photos, whatever came of it).
	Analysed bool
}

// IndexReport is the outcome of Index.
type IndexReport struct {
	// Files is how many photos the scan found.
	Files int
	// Counts per outcome.
	Added, Unchanged, Moved, Duplicates, Updated, Failed int
	// Faces is how many faces were recorded for the photos added or
	// updated: FacesAdded for the added, FacesUpdated for the updated.
	Faces, FacesAdded, FacesUpdated int
	// Missing is how many of the library's photos are missing after this
	// run; NewlyMissing were marked in it, Returned were missing and
	// found again.
	Missing, NewlyMissing, Returned int
	// Errors lists the files and folders that could not be read, with the
	// reason (scan errors, then files in the order they failed).
	Errors []FileError
	// Wall is the time Index took.
	Wall time.Duration
}

// Skipped is how many photos were found and not analysed again:
// unchanged, moved and duplicate.
func (r *IndexReport) Skipped() int { return r.Unchanged + r.Moved + r.Duplicates }

// known is a photo as recorded when indexing starts.
type known struct {
	id      int64
	path    string
	sum     [32]byte
	missing bool
}

// planned is what Index decided for one file found by the scan.
type planned struct {
	path    string
	sum     [32]byte
	size    int64
	stamp   fileStamp // the file's stamp (zero: unknown, read again next time)
	trusted bool      // not read: its stamp and size are as recorded
	outcome Outcome
	reason  string // why it failed
	photo   int64  // the photo updated (Updated), moved (Moved) or found (Unchanged)
}

// Index adds the photos under roots (folders walked recursively following
// symbolic links, or files; see Scan) to the library, in three steps:
//
//  1. Every file found is read and hashed (SHA-256 of its bytes), on
//     Workers goroutines, except a file at a recorded photo's path whose
//     size, modification time and inode are as recorded then (fileStamp
//     says why and what that misses; Rehash reads them too): it is taken
//     to hold the recorded bytes, unread.
//  2. Each file is matched against the library: bytes already recorded at
//     the same path are unchanged; at another path whose file no longer
//     holds them, a move (the path is updated; faces, names and every
//     decision kept; all moves of a run are committed in one transaction,
//     so files renamed in a cycle, IMG_2 → IMG_1 → IMG_0, move cleanly);
//     at another path that still holds them, or found twice in this run,
//     a duplicate (skipped). New bytes at a path the library records for
//     bytes found nowhere else are an edit of that photo (Updated); other
//     new bytes are a new photo.
//  3. New and edited photos are decoded (EXIF orientation applied), their
//     faces found and described by the pipeline on Workers goroutines, and
//     each recorded with its faces (box, 68 landmarks, detector score,
//     landmark fit from face.LandmarkFit, descriptor, thumbnail) in one
//     transaction of its own: a run interrupted at any point, even by
//     SIGKILL, loses no photo committed before, and the next run skips
//     those and goes on with the rest. An edited photo keeps the user's
//     decisions (see replaceContentTx). The library's journal is SQLite's
//     WAL with synchronous=NORMAL (see openDB): a commit is in the
//     journal, in the operating system's hands, before Index goes on, so
//     a killed process loses nothing committed, and no photo waits for a
//     disk flush; only a power failure or a crash of the operating system
//     can undo the last commits (never half of one: the library stays
//     consistent), and the next run analyses those photos again. A flush
//     per photo (synchronous=FULL) would protect only that recomputable
//     work.
//
// A file that cannot be read, decoded or analysed is recorded in the
// library's scan errors with the reason (and in the report), and the run
// goes on; a later run that reads it, or that scans its folder and no
// longer finds it, removes the error. Finally every photo of the library
// not found in this run is checked: a photo whose file no longer exists is
// marked missing, never deleted (ForgetMissing deletes on request, and
// says what happens to names), and a missing photo whose file is back is
// marked present.
//
// Index stops early when ctx is done, returning the report so far and
// ctx's error; what was committed stays.
//
// One Index runs on a library at a time, across processes (a lock on
// IndexLockFile): another waits for it to finish, calling opt.Waiting,
// and then finds the photos it recorded unchanged, instead of analysing
// them again and calling them copies.
func (l *Library) Index(ctx context.Context, roots []string, opt IndexOptions) (*IndexReport, error) {
	start := time.Now()
	if err := opt.validate(); err != nil {
		return nil, err
	}
	unlock, err := l.lockIndexing(ctx, opt.Waiting)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start = time.Now() // waiting for another run is not indexing
	scan, err := Scan(ctx, roots)
	if err != nil {
		return nil, err
	}
	photos, err := l.Photos()
	if err != nil {
		return nil, err
	}
	rep := &IndexReport{Files: len(scan.Files), Errors: append([]FileError{}, scan.Errors...)}
	finish := func(err error) (*IndexReport, error) {
		rep.Wall = time.Since(start)
		return rep, err
	}
	for _, e := range scan.Errors {
		if err := l.recordScanError(ctx, e.Path, e.Err); err != nil {
			return finish(fmt.Errorf("recording a scan error: %w", err))
		}
	}

	// 1. Hash.
	var stamps map[string]recorded
	if !opt.Rehash {
		if stamps, err = l.recordedStamps(ctx); err != nil {
			return finish(fmt.Errorf("reading photos: %w", err))
		}
	}
	plan := make([]planned, len(scan.Files))
	var readMu sync.Mutex
	read := 0
	err = parallel(ctx, opt.Workers, len(plan), func(i int) error {
		p := &plan[i]
		p.path = scan.Files[i]
		if r, ok := stamps[p.path]; ok && unchangedFile(p.path, r) {
			p.sum, p.size, p.stamp, p.trusted = r.sum, r.size, r.stamp, true
		} else if c, err := opt.read(p.path, opt.Limits.MaxBytes); err != nil {
			p.outcome, p.reason = PhotoFailed, err.Error()
		} else {
			p.sum, p.size, p.stamp = c.SHA256, c.Size, c.stamp
		}
		if opt.Reading != nil {
			readMu.Lock()
			read++
			opt.Reading(read, len(plan))
			readMu.Unlock()
		}
		return nil
	})
	if err != nil {
		return finish(err)
	}

	// 2. Match, and commit the moves.
	seen := map[int64]bool{}
	if err := l.match(ctx, plan, photos, seen); err != nil {
		return finish(err)
	}
	var mu sync.Mutex
	done := 0
	record := func(p *planned, faces int, analysed bool) error {
		mu.Lock()
		defer mu.Unlock()
		switch p.outcome {
		case PhotoAdded:
			rep.Added++
		case PhotoUnchanged:
			rep.Unchanged++
		case PhotoMoved:
			rep.Moved++
		case PhotoDuplicate:
			rep.Duplicates++
		case PhotoUpdated:
			rep.Updated++
		case PhotoFailed:
			rep.Failed++
			rep.Errors = append(rep.Errors, FileError{Path: p.path, Err: p.reason})
			if err := l.recordScanError(ctx, p.path, p.reason); err != nil {
				return fmt.Errorf("recording a scan error: %w", err)
			}
		}
		rep.Faces += faces
		switch p.outcome {
		case PhotoAdded:
			rep.FacesAdded += faces
		case PhotoUpdated:
			rep.FacesUpdated += faces
		}
		done++
		if opt.Progress != nil {
			opt.Progress(IndexProgress{Done: done, Total: len(plan), Path: p.path, Outcome: p.outcome, Faces: faces, Analysed: analysed})
		}
		return nil
	}
	var todo, rest []int
	for i := range plan {
		switch plan[i].outcome {
		case PhotoAdded, PhotoUpdated:
			todo = append(todo, i)
		default:
			rest = append(rest, i)
		}
	}
	if opt.Planned != nil {
		opt.Planned(len(todo), len(rest))
	}
	for _, i := range rest {
		if err := record(&plan[i], 0, false); err != nil {
			return finish(err)
		}
	}

	// 3. Analyse and commit photo by photo.
	err = parallel(ctx, opt.Workers, len(todo), func(k int) error {
		p := &plan[todo[k]]
		n, err := l.analyse(ctx, p, opt)
		if err != nil {
			return err
		}
		return record(p, n, true)
	})
	if err != nil {
		return finish(err)
	}
	for i := range plan {
		if plan[i].photo != 0 {
			seen[plan[i].photo] = true
		}
	}
	if err := l.checkMissing(ctx, photos, seen, rep); err != nil {
		return finish(err)
	}
	return finish(l.forgetStaleErrors(ctx, roots, rep.Errors))
}

// forgetStaleErrors deletes the recorded scan errors of files under roots
// that this complete run did not fail on: they were deleted, or are no
// longer under a folder scanned (a file that now reads had its error
// deleted when it was recorded).
func (l *Library) forgetStaleErrors(ctx context.Context, roots []string, current []FileError) error {
	failed := map[string]bool{}
	for _, e := range current {
		failed[e.Path] = true
	}
	var abs []string
	for _, r := range roots {
		a, err := filepath.Abs(r)
		if err != nil {
			return fmt.Errorf("updating the library: %w", err)
		}
		abs = append(abs, a)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT path FROM scan_errors`)
	if err != nil {
		return fmt.Errorf("reading scan errors: %w", err)
	}
	var stale []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return fmt.Errorf("reading scan errors: %w", err)
		}
		if failed[p] {
			continue
		}
		for _, a := range abs {
			if p == a || strings.HasPrefix(p, strings.TrimSuffix(a, string(filepath.Separator))+string(filepath.Separator)) {
				stale = append(stale, p)
				break
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading scan errors: %w", err)
	}
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		for _, p := range stale {
			if _, err := tx.ExecContext(ctx, `DELETE FROM scan_errors WHERE path = ?`, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("updating the library: %w", err)
	}
	return nil
}

// parallel runs f(0..n-1) on workers goroutines, stopping at the first
// error or when ctx is done (returning that error).
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if ctx.Err() != nil {
					continue
				}
				if err := f(i); err != nil {
					cancel(err)
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case work <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// match decides each hashed file's outcome (step 2 of Index) and commits
// all moves in one transaction. seen collects the photos found.
func (l *Library) match(ctx context.Context, plan []planned, photos []Photo, seen map[int64]bool) error {
	byHash := map[[32]byte]known{}
	byPath := map[string]known{}
	for _, p := range photos {
		k := known{id: p.ID, path: p.Path, sum: p.SHA256, missing: p.Missing}
		byHash[k.sum], byPath[k.path] = k, k
	}
	scanned := map[string]int{} // path → index in plan (read successfully)
	for i := range plan {
		if plan[i].outcome != PhotoFailed {
			scanned[plan[i].path] = i
		}
	}
	// The file that takes each content: its recorded path if scanned,
	// else the first path found with it; the others are duplicates.
	holder := map[[32]byte]int{}
	for i := range plan {
		p := &plan[i]
		if p.outcome == PhotoFailed {
			continue
		}
		h, ok := holder[p.sum]
		switch {
		case !ok:
			holder[p.sum] = i
		case byHash[p.sum].path == p.path && byHash[p.sum].id != 0:
			plan[h].outcome = PhotoDuplicate
			holder[p.sum] = i
		default:
			p.outcome = PhotoDuplicate
		}
	}
	type move struct {
		id   int64
		path string
		i    int
	}
	var moves []move
	movedAway := map[int64]bool{}
	var unmissing []int64
	var restamp []int // unchanged files read: their stamps are recorded
	for sum, i := range holder {
		p := &plan[i]
		k, isKnown := byHash[sum]
		switch {
		case !isKnown:
			p.outcome = PhotoAdded // or Updated, decided below
		case k.path == p.path:
			p.outcome, p.photo = PhotoUnchanged, k.id
			if k.missing {
				unmissing = append(unmissing, k.id)
			}
			if !p.trusted {
				restamp = append(restamp, i)
			}
		default:
			// Does the recorded path still hold these bytes? If it was
			// scanned we know; else look.
			still := false
			if j, ok := scanned[k.path]; ok {
				still = plan[j].sum == sum
			} else {
				still = sameContent(k.path, sum, p.size)
			}
			if still {
				p.outcome, p.photo = PhotoDuplicate, 0
				seen[k.id] = true
			} else {
				p.outcome, p.photo = PhotoMoved, k.id
				moves = append(moves, move{k.id, p.path, i})
				movedAway[k.id] = true
			}
		}
	}
	// A move onto the path of a photo that is not moving (its bytes are
	// gone from there) drops that photo, unless the user decided about its
	// faces: then the file fails with errPathTaken and nothing moves.
	kept := moves[:0]
	for _, m := range moves {
		if occ, ok := byPath[m.path]; ok && !movedAway[occ.id] {
			decided, err := hasDecisions(ctx, l.db, occ.id)
			if err != nil {
				return fmt.Errorf("updating the library: %w", err)
			}
			if decided {
				plan[m.i].outcome, plan[m.i].reason, plan[m.i].photo = PhotoFailed, errPathTaken.Error(), 0
				delete(movedAway, m.id)
				continue
			}
		}
		kept = append(kept, m)
	}
	moves = kept
	for i := range plan {
		p := &plan[i]
		if p.outcome != PhotoAdded {
			continue
		}
		if k, ok := byPath[p.path]; ok && !movedAway[k.id] {
			p.outcome, p.photo = PhotoUpdated, k.id
		}
	}
	if len(moves) == 0 && len(unmissing) == 0 && len(restamp) == 0 {
		return nil
	}
	slices.SortFunc(moves, func(a, b move) int { return cmp.Compare(a.id, b.id) })
	// All moves at once: first every moving photo leaves its path (to a
	// placeholder no path Index records can equal: those are absolute),
	// then each takes its new one,
	// so moves in a cycle do not collide.
	return l.inTx(ctx, func(tx *sql.Tx) error {
		for _, id := range unmissing {
			if _, err := tx.ExecContext(ctx, `UPDATE photos SET missing = 0 WHERE id = ?`, id); err != nil {
				return err
			}
		}
		for _, i := range restamp {
			if err := setStampTx(ctx, tx, plan[i].photo, plan[i].stamp); err != nil {
				return err
			}
		}
		for _, m := range moves {
			if _, err := tx.ExecContext(ctx, `UPDATE photos SET path = ? WHERE id = ?`, fmt.Sprintf("moving:%d", m.id), m.id); err != nil {
				return err
			}
		}
		for _, m := range moves {
			if err := l.moveTx(ctx, tx, m.id, m.path, plan[m.i].stamp); err != nil {
				return fmt.Errorf("recording the move to %s: %w", m.path, err)
			}
		}
		return nil
	})
}

// analyse reads, describes and records a new or edited photo (step 3 of
// Index) and returns how many faces it has. Problems with the file set
// p.outcome to Failed with the reason; the error returned is one of the
// library itself.
func (l *Library) analyse(ctx context.Context, p *planned, opt IndexOptions) (int, error) {
	fail := func(err error) (int, error) {
		p.outcome, p.reason, p.photo = PhotoFailed, err.Error(), 0
		return 0, nil
	}
	// The file is read and hashed again (step 1 kept only its hash: the
	// bytes of every photo found cannot all be held until analysed), so
	// what is recorded is exactly what was matched. That costs about as
	// much as step 1 and is small beside decoding and analysing.
	c, err := opt.read(p.path, opt.Limits.MaxBytes)
	if err != nil {
		return fail(err)
	}
	if c.SHA256 != p.sum {
		return fail(errors.New("the file changed while the library was being updated (it will be read again next time)"))
	}
	img, _, err := imaging.Decode(c.Data, opt.Limits)
	if err != nil {
		return fail(err)
	}
	// A malformed EXIF block only loses the time taken: the decoder
	// ignored it too.
	x, _ := ReadJPEGEXIF(c.Data)
	rec := PhotoRecord{Path: p.path, SHA256: c.SHA256, Size: c.Size, Taken: x.TakenString(), Width: img.W, Height: img.H, stamp: c.stamp}
	found, err := opt.run(img)
	if err != nil {
		return fail(fmt.Errorf("analysing the faces: %w", err))
	}
	faces, err := newFaces(img, found, Detected)
	if err != nil {
		return fail(err)
	}
	n := len(faces)
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		if p.outcome == PhotoUpdated {
			n, err = l.replaceContentTx(ctx, tx, p.photo, rec, faces)
			return err
		}
		// Another process may have recorded these bytes since.
		var id int64
		switch err := tx.QueryRowContext(ctx, `SELECT id FROM photos WHERE content_mac = ?`, l.keys.contentID(c.SHA256)).Scan(&id); {
		case err == nil:
			p.outcome, n = PhotoDuplicate, 0
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		p.photo, _, err = l.addPhotoTx(ctx, tx, rec, faces)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("recording %s: %w", p.path, err)
	}
	return n, nil
}

// newFaces turns the pipeline's faces into faces to store.
func newFaces(img *imaging.RGB, faces []face.Face, src Source) ([]NewFace, error) {
	out := make([]NewFace, 0, len(faces))
	for i := range faces {
		f := &faces[i]
		if len(f.Descriptor) == 0 {
			return nil, fmt.Errorf("face %d has no descriptor", i)
		}
		thumb, err := Thumbnail(img, f.Box)
		if err != nil {
			return nil, err
		}
		lm := f.Landmarks
		out = append(out, NewFace{Box: f.Box, Score: f.Score, Fit: face.LandmarkFit(&lm), Source: src,
			Landmarks: &lm, Descriptor: f.Descriptor, Thumbnail: thumb})
	}
	return out, nil
}

// sameContent reports whether the file at path still holds the bytes
// whose hash is sum.
func sameContent(path string, sum [32]byte, size int64) bool {
	st, err := os.Stat(path)
	if err != nil || st.Size() != size {
		return false
	}
	c, err := ReadContent(path, size)
	return err == nil && c.SHA256 == sum
}

// checkMissing looks at every photo recorded at the start and not found
// in this run: gone files are marked missing, files back marked present.
// Only "does not exist" counts as gone: a file that cannot be read for
// another reason (permissions, an I/O error, an unmounted drive's folder
// still present) is left as it was.
func (l *Library) checkMissing(ctx context.Context, photos []Photo, seen map[int64]bool, r *IndexReport) error {
	for _, p := range photos {
		if err := ctx.Err(); err != nil {
			return err
		}
		if seen[p.ID] {
			if p.Missing { // found again (moves and edits cleared the mark already)
				if err := l.setMissing(ctx, p.ID, false); err != nil {
					return fmt.Errorf("updating the library: %w", err)
				}
				r.Returned++
			}
			continue
		}
		_, err := os.Stat(p.Path)
		switch {
		case err == nil && p.Missing:
			if err := l.setMissing(ctx, p.ID, false); err != nil {
				return fmt.Errorf("updating the library: %w", err)
			}
			r.Returned++
		case errors.Is(err, fs.ErrNotExist) && !p.Missing:
			if err := l.setMissing(ctx, p.ID, true); err != nil {
				return fmt.Errorf("updating the library: %w", err)
			}
			r.NewlyMissing++
		}
	}
	if err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM photos WHERE missing = 1`).Scan(&r.Missing); err != nil {
		return fmt.Errorf("updating the library: %w", err)
	}
	return nil
}

// ParseBox parses a face box given as "X,Y,W,H" (pixels of the photo as
// displayed, EXIF orientation applied: left, top, width, height; spaces
// around the numbers allowed). The numbers must be finite, the size
// positive; fractions are allowed. Errors wrap ErrBox and say what is
// wrong.
func ParseBox(s string) (Box, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return Box{}, fmt.Errorf("%w: %q: want X,Y,W,H (four numbers separated by commas)", ErrBox, s)
	}
	var v [4]float64
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Box{}, fmt.Errorf("%w: %q: %q is not a number", ErrBox, s, strings.TrimSpace(p))
		}
		v[i] = f
	}
	b := Box{X: v[0], Y: v[1], Width: v[2], Height: v[3]}
	if b.Width <= 0 || b.Height <= 0 {
		return Box{}, fmt.Errorf("%w: %q: width and height must be positive", ErrBox, s)
	}
	return b, nil
}

// Manual faces.
const (
	// MinManualFace is the smallest side of a face box drawn by hand, in
	// pixels: the landmark network reads a 112-pixel crop, and a face a
	// few pixels wide gives it nothing to read.
	MinManualFace = 12
	// maxOutside is the share of a hand-drawn box's area allowed outside
	// the photo: faces cut by the photo's edge are drawn past it (as the
	// detector's boxes are), a box mostly outside is a mistake.
	maxOutside = 0.25
	// duplicateIoU is the overlap with a face already in the photo at which
	// a hand-drawn face is refused as the same face.
	duplicateIoU = 0.5
)

// ErrDuplicateFace: a face drawn by hand overlaps a face the photo has.
var ErrDuplicateFace = errors.New("the photo already has a face there")

// AddManualFace adds a face the user drew where the detector missed one,
// in the photo recorded at path (made absolute). Its 68 landmarks and its
// descriptor are computed in box by the pipeline, as for a detected face;
// its score is 0 (no detector scored it) and its source Manual. With a
// person's name the face is named (as the user's decision), creating the
// person if new; face and name are recorded in one transaction.
//
// The box must be at least MinManualFace pixels on each side, lie in the
// photo (at most a quarter of it outside) and not overlap a face the photo
// already has (IoU ≥ 0.5: ErrDuplicateFace; removed faces do not count).
// The file must still hold the bytes that were indexed.
func (l *Library) AddManualFace(ctx context.Context, p *face.Pipeline, path string, box Box, person string) (Face, error) {
	if p == nil || !p.Options().Descriptors {
		return Face{}, errors.New("adding a face needs a pipeline that computes descriptors (see PipelineOptions)")
	}
	for _, v := range []float64{box.X, box.Y, box.Width, box.Height} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Face{}, fmt.Errorf("%w: coordinates must be finite", ErrBox)
		}
	}
	if box.Width < MinManualFace || box.Height < MinManualFace {
		return Face{}, fmt.Errorf("%w: %gx%g is smaller than %dx%d pixels", ErrBox, box.Width, box.Height, MinManualFace, MinManualFace)
	}
	if person != "" {
		if _, _, err := normaliseName(person); err != nil {
			return Face{}, fmt.Errorf("%q: %w", person, err)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Face{}, fmt.Errorf("%s: %w", path, err)
	}
	ph, err := l.PhotoByPath(abs)
	if errors.Is(err, ErrUnknownPhoto) {
		return Face{}, fmt.Errorf("%s is not in the library (add it with veil library add): %w", path, ErrUnknownPhoto)
	}
	if err != nil {
		return Face{}, err
	}
	c, err := ReadContent(abs, imaging.DefaultLimits().MaxBytes)
	if err != nil {
		return Face{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if c.SHA256 != ph.SHA256 {
		return Face{}, fmt.Errorf("%s changed since it was added: run veil library add on it first", path)
	}
	img, _, err := imaging.Decode(c.Data, imaging.DefaultLimits())
	if err != nil {
		return Face{}, fmt.Errorf("%s: %w", path, err)
	}
	if box.Intersection(Box{Width: float64(img.W), Height: float64(img.H)}) < (1-maxOutside)*box.Area() {
		return Face{}, fmt.Errorf("%w: %g,%g %gx%g lies outside the %dx%d photo (at most a quarter of the box may)",
			ErrBox, box.X, box.Y, box.Width, box.Height, img.W, img.H)
	}
	existing, err := l.Faces(FaceFilter{Photo: abs})
	if err != nil {
		return Face{}, err
	}
	for _, f := range existing {
		if f.Box.IoU(box) >= duplicateIoU {
			return Face{}, fmt.Errorf("face %d: %w", f.ID, ErrDuplicateFace)
		}
	}
	faces := []face.Face{{Box: box}}
	if _, err := p.Complete(img, faces); err != nil {
		return Face{}, fmt.Errorf("describing the face: %w", err)
	}
	nf, err := newFaces(img, faces, Manual)
	if err != nil {
		return Face{}, fmt.Errorf("describing the face: %w", err)
	}
	nf[0].Score = 0
	var id int64
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		ids, err := l.insertFaces(ctx, tx, ph.ID, nf)
		if err != nil {
			return err
		}
		id = ids[0]
		if person == "" {
			return nil
		}
		pid, _, err := l.ensurePerson(ctx, tx, person)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE faces SET person_id = ?, assigned_by = 'user' WHERE id = ?`, pid, id)
		return err
	})
	if err != nil {
		return Face{}, fmt.Errorf("adding the face: %w", err)
	}
	return l.Face(id)
}

// Throughput is a measured indexing rate (MeasureIndexing).
type Throughput struct {
	Photos  int `json:"photos"`
	Faces   int `json:"faces"`
	Failed  int `json:"failed"`
	Workers int `json:"workers"`
	// WallS is the wall time of Index, from the scan to the last commit.
	WallS float64 `json:"wall_s"`
	// PhotosPerSecond is Photos / WallS: photos read, hashed, decoded,
	// analysed (faces found and described), thumbnailed, sealed and
	// committed per second.
	PhotosPerSecond float64 `json:"photos_per_second"`
	// CPUS is the processor time the process used meanwhile (user and
	// system, all threads; 0 where unknown), and CPUSPerPhoto its share
	// per photo: unlike the wall time it does not grow when other
	// programs compete for the cores, so runs on a busy machine compare.
	CPUS         float64 `json:"cpu_s"`
	CPUSPerPhoto float64 `json:"cpu_s_per_photo"`
}

// MeasureIndexing indexes roots into a new library in a temporary folder
// (deleted after; its passphrase random, its key derivation cheap since
// nothing in it is kept) and returns the rate: what veil library add does
// for new photos, end to end. opt.Workers 0 uses every core.
func MeasureIndexing(ctx context.Context, roots []string, opt IndexOptions) (*Throughput, error) {
	dir, err := os.MkdirTemp("", "veil-index-bench-")
	if err != nil {
		return nil, fmt.Errorf("a temporary library: %w", err)
	}
	defer os.RemoveAll(dir)
	pass := make([]byte, 16)
	if _, err := rand.Read(pass); err != nil {
		return nil, fmt.Errorf("a temporary passphrase: %w", err)
	}
	l, err := Create(filepath.Join(dir, "lib"), pass, CreateOptions{KDF: KDFParams{Time: 1, MemoryKiB: 64, Threads: 1}, TestSettings: true})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	cpu0 := processCPU()
	rep, err := l.Index(ctx, roots, opt)
	if err != nil {
		return nil, err
	}
	cpu := processCPU() - cpu0
	workers := opt.Workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	t := &Throughput{Photos: rep.Added, Faces: rep.Faces, Failed: len(rep.Errors), Workers: workers, WallS: rep.Wall.Seconds()}
	if t.WallS > 0 {
		t.PhotosPerSecond = float64(t.Photos) / t.WallS
	}
	if cpu > 0 {
		t.CPUS = cpu.Seconds()
		if t.Photos > 0 {
			t.CPUSPerPhoto = t.CPUS / float64(t.Photos)
		}
	}
	return t, nil
}

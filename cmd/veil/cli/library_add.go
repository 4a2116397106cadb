package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face"
	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/internal/progress"
	"github.com/veil-privacy/veil/tagging"
	"github.com/veil-privacy/veil/tagging/fedjoin"
)

// libraryAddJSON is the output of veil library add --json. The first six
// fields are the contract; the others say more.
type libraryAddJSON struct {
	PhotosAdded   int                 `json:"photos_added"`
	PhotosSkipped int                 `json:"photos_skipped"`
	PhotosFailed  int                 `json:"photos_failed"`
	Faces         int                 `json:"faces"`
	Errors        []tagging.FileError `json:"errors"`
	WallS         float64             `json:"wall_s"`

	// FacesAdded and FacesUpdated split Faces between the photos added
	// and those analysed again after an edit.
	FacesAdded   int `json:"faces_added"`
	FacesUpdated int `json:"faces_updated"`

	PhotosFound      int  `json:"photos_found"`
	PhotosUnchanged  int  `json:"photos_unchanged"`
	PhotosMoved      int  `json:"photos_moved"`
	PhotosDuplicate  int  `json:"photos_duplicate"`
	PhotosUpdated    int  `json:"photos_updated"`
	PhotosMissing    int  `json:"photos_missing"`
	PhotosNewMissing int  `json:"photos_newly_missing"`
	PhotosReturned   int  `json:"photos_returned"`
	PhotosForgotten  int  `json:"photos_forgotten"`
	FacesForgotten   int  `json:"faces_forgotten"`
	Interrupted      bool `json:"interrupted"`
	// PhotosPerSecond is the photos analysed (added or updated) per
	// second of wall time.
	PhotosPerSecond float64 `json:"photos_per_second"`
}

// libraryAddHelp is veil library add's --help.
const libraryAddHelp = `Add scans the folders (recursively, following symbolic links) and files given
for JPEG and PNG photos and records each in the library with its faces: box, 68
landmarks, detector score, how well the landmarks fit a face, descriptor and a
96-pixel thumbnail (the last three, and the landmarks, encrypted). Photos stay
where they are; the library keeps their paths, content hashes (SHA-256), sizes,
dimensions and EXIF time taken. Folders and files whose names start with "."
are skipped inside folders.

Photos are recognised by their content, not their name: a photo already in the
library is skipped, even if it was moved or renamed (the library then records
its new path and keeps its faces and names); a copy of a photo is skipped; a
photo edited in place is analysed again, keeping the faces you named, removed
or drew (matched by position). A file the library recorded whose size,
modification time and inode are unchanged is not read again (as rsync and git
check); --rehash reads and hashes every file, for a photo rewritten with its
size kept and its modification time set back (touch -r, exiftool -P).

Faces are found by both of face-api's detectors and described with both
alignments averaged (the settings measured best on LFW), on every core
(--workers). Each photo is committed on its own, so an interrupted run (Ctrl-C,
a crash, a power cut) loses nothing: run the same command again to go on.

One veil library add indexes a library at a time: a second one started
meanwhile (in another terminal, or by a scheduled job) says so and waits for
the first to finish, then goes on, finding what the first recorded
unchanged. Waiting, rather than refusing, lets both runs' folders be added
without the user starting the second again; Ctrl-C stops the wait.

Files that cannot be read (damaged, not a photo, HEIC and other formats that
are not supported, broken links) are listed with the reason, remembered for veil
library status, and skipped; the run goes on.

Photos of the library whose files have disappeared are marked missing (veil
library status lists them), never deleted: their faces and names come back
when the file does, at the same path or elsewhere. --forget-missing deletes
the photos missing after this run, with their faces and the names given to
those faces (people stay, with fewer faces).

Exit status: 0 when the run finished (files that could not be read are
reported, not fatal); 2 on a wrong passphrase; 1 on bad input or an error of
the library; 130 when interrupted (what was done is kept).`

// libraryAddFlags are veil library add's flags.
type libraryAddFlags struct {
	lf                          libraryFlags
	models                      string
	workers                     int
	json, quiet, forget, rehash bool
}

func newLibraryAddCmd(e *env) *cobra.Command {
	f := &libraryAddFlags{}
	cmd := &cobra.Command{
		Use:   "add PATH...",
		Short: "Add photos to the library: find, describe and record their faces",
		Long:  libraryAddHelp,
		Example: `  veil library add --library lib ~/Pictures
  veil library add --library lib --json --quiet ~/Pictures/2024 ~/Desktop/scan.png
  VEIL_LIBRARY=lib veil library add ~/Pictures --forget-missing`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.workers < 0 {
				return fmt.Errorf("--workers %d: want 0 (every core) or more", f.workers)
			}
			for _, a := range args {
				if _, err := os.Stat(a); err != nil {
					return fmt.Errorf("cannot read %s: %w", a, errors.Unwrap(err))
				}
			}
			start := time.Now()
			return withLibrary(e, &f.lf, func(l *tagging.Library) error { return runLibraryAdd(cmd.Context(), e, f, l, args, start) })
		},
	}
	f.lf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	fl.IntVar(&f.workers, "workers", 0, "photos analysed at once (0: one per core)")
	fl.BoolVar(&f.forget, "forget-missing", false, "delete the photos whose files are missing after this run, with their faces and the names given to them (people stay)")
	fl.BoolVar(&f.rehash, "rehash", false, "read and hash every file, even those whose size, modification time and inode are as recorded")
	fl.BoolVar(&f.json, "json", false, "print JSON")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "no progress output on stderr")
	return cmd
}

// runLibraryAdd indexes paths into l (tagging.Library.Index) and reports.
func runLibraryAdd(ctx context.Context, e *env, f *libraryAddFlags, l *tagging.Library, paths []string, start time.Time) error {
	p, err := e.pipeline(tagging.PipelineOptions(f.models))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opt, waited, done := f.indexOptions(e, p)
	rep, err := l.Index(ctx, paths, opt)
	done()
	interrupted := err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled)
	if err != nil && (!interrupted || rep == nil) {
		if interrupted && *waited && rep == nil {
			return &exitError{code: exitInterrupted, err: errors.New("interrupted while waiting for the other veil library add: nothing was added")}
		}
		if interrupted {
			return &exitError{code: exitInterrupted, err: errors.New("interrupted while listing the photos: nothing was added")}
		}
		return err
	}
	out := libraryAddReport(rep, time.Since(start), interrupted)
	if f.forget && !interrupted {
		if out.PhotosForgotten, out.FacesForgotten, err = l.ForgetMissing(context.Background()); err != nil {
			return err
		}
		out.PhotosMissing = 0
	}
	if f.json {
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		printLibraryAdd(e, &out)
	}
	if interrupted {
		return &exitError{code: exitInterrupted, err: errors.New("interrupted: the photos recorded so far are kept; run the same command again to go on")}
	}
	return nil
}

// indexOptions are the options of the index run, with its progress bars
// on stderr; waited is set once the run waited for another, done ends the
// bars.
func (f *libraryAddFlags) indexOptions(e *env, p *face.Pipeline) (opt tagging.IndexOptions, waited *bool, done func()) {
	var reading, bar *progress.Bar
	waited = new(bool)
	opt = tagging.IndexOptions{Pipeline: p, Workers: f.workers, Rehash: f.rehash,
		Waiting: func(pid int) {
			*waited = true
			who := ""
			if pid > 0 {
				who = fmt.Sprintf(" (pid %d)", pid)
			}
			fmt.Fprintf(e.stderr, "another veil library add is indexing this library%s; waiting for it to finish (Ctrl-C to stop)\n", who)
		},
		Reading: func(n, total int) {
			if n == 1 {
				reading = progress.New(e.stderr, "reading", total, f.quiet || total < 1000)
			}
			reading.Add(1)
			if n == total {
				reading.Done()
			}
		},
		Planned: func(analyse, rest int) {
			bar = progress.New(e.stderr, "analysing", analyse, f.quiet)
		},
		Progress: func(pr tagging.IndexProgress) {
			if pr.Analysed {
				bar.Add(1)
			}
		}}
	return opt, waited, func() { bar.Done() }
}

// libraryAddReport is veil library add's report of an index run.
func libraryAddReport(rep *tagging.IndexReport, wall time.Duration, interrupted bool) libraryAddJSON {
	out := libraryAddJSON{
		PhotosAdded: rep.Added, PhotosSkipped: rep.Skipped(), PhotosFailed: len(rep.Errors),
		Faces: rep.Faces, FacesAdded: rep.FacesAdded, FacesUpdated: rep.FacesUpdated, Errors: rep.Errors, WallS: wall.Seconds(),
		PhotosFound: rep.Files, PhotosUnchanged: rep.Unchanged, PhotosMoved: rep.Moved,
		PhotosDuplicate: rep.Duplicates, PhotosUpdated: rep.Updated, PhotosMissing: rep.Missing,
		PhotosNewMissing: rep.NewlyMissing, PhotosReturned: rep.Returned, Interrupted: interrupted,
	}
	if out.Errors == nil {
		out.Errors = []tagging.FileError{}
	}
	if s := rep.Wall.Seconds(); s > 0 {
		out.PhotosPerSecond = float64(rep.Added+rep.Updated) / s
	}
	return out
}

func printLibraryAdd(e *env, o *libraryAddJSON) {
	w := e.stdout
	fmt.Fprintf(w, "found %s: added %d (%s), skipped %d (unchanged %d, moved %d, copies %d)",
		plural(o.PhotosFound, "photo"), o.PhotosAdded, plural(o.FacesAdded, "face"), o.PhotosSkipped, o.PhotosUnchanged, o.PhotosMoved, o.PhotosDuplicate)
	if o.PhotosUpdated > 0 {
		fmt.Fprintf(w, ", analysed again after an edit %d (%s)", o.PhotosUpdated, plural(o.FacesUpdated, "face"))
	}
	fmt.Fprintf(w, " in %.1f s\n", o.WallS)
	if o.PhotosFailed > 0 {
		fmt.Fprintf(w, "could not read %s:\n", plural(o.PhotosFailed, "file"))
		for _, f := range o.Errors {
			fmt.Fprintf(w, "  %s: %s\n", f.Path, f.Err)
		}
	}
	if o.PhotosNewMissing > 0 || o.PhotosReturned > 0 {
		fmt.Fprintf(w, "photos gone since the last run: %d; found again: %d\n", o.PhotosNewMissing, o.PhotosReturned)
	}
	if o.PhotosForgotten > 0 {
		fmt.Fprintf(w, "forgot %s and %s\n", plural(o.PhotosForgotten, "missing photo"), plural(o.FacesForgotten, "face"))
	} else if o.PhotosMissing == 1 {
		fmt.Fprintln(w, "1 photo of the library is missing (veil library status lists it; --forget-missing deletes it)")
	} else if o.PhotosMissing > 0 {
		fmt.Fprintf(w, "%s of the library are missing (veil library status lists them; --forget-missing deletes them)\n", plural(o.PhotosMissing, "photo"))
	}
}

// libraryStatusHelp is veil library status's --help.
const libraryStatusHelp = `Status counts the photos of the library (and those missing: their files were
gone at the last veil library add), the faces (named, named by you, drawn by
hand, removed as false), the people (and hidden ones), and lists the files that
could not be read with the reason, the missing photos, and the photos in which
no face was found (or every face was removed as false): if one shows a face
the detector missed, draw it with veil faces add PHOTO --box X,Y,W,H. It
prints the library's schema version, and, for a library that joined a
federation (veil library join), the coordinator, the last run with its model
decision, and the privacy ledger kept in the library (ε spent per person).

Exit status: 0 on success; 2 on a wrong passphrase; 1 when the library cannot
be opened otherwise.`

func newLibraryStatusCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count the library's photos, faces and people; list failed and missing files and photos without a face",
		Long:  libraryStatusHelp,
		Example: `  veil library status --library lib
  veil library status --library lib --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				st, err := l.Status(cmd.Context())
				if err != nil {
					return err
				}
				fst, err := fedjoin.ReadStatus(cmd.Context(), l)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, struct {
						*tagging.Status
						Federation *fedjoin.Status `json:"federation"`
					}{st, fst})
				}
				defer printFederation(e, fst)
				w := e.stdout
				fmt.Fprintf(w, "library %s (schema version %d)\n", l.Dir(), st.SchemaVersion)
				fmt.Fprintf(w, "photos  %d (missing %d)\n", st.Photos, st.Missing)
				fmt.Fprintf(w, "faces   %d (named %d, of which by you %d; drawn by hand %d; removed as false %d)\n",
					st.Faces, st.Named, st.NamedByUser, st.Manual, st.Removed)
				fmt.Fprintf(w, "people  %d (hidden %d)\n", st.People, st.Hidden)
				if len(st.Failed) > 0 {
					fmt.Fprintf(w, "files that could not be read (%d):\n", len(st.Failed))
					for _, f := range st.Failed {
						fmt.Fprintf(w, "  %s: %s\n", f.Path, f.Err)
					}
				}
				if len(st.MissingPaths) > 0 {
					fmt.Fprintf(w, "missing photos (%d; veil library add --forget-missing deletes them):\n", len(st.MissingPaths))
					for _, p := range st.MissingPaths {
						fmt.Fprintf(w, "  %s\n", p)
					}
				}
				if len(st.NoFacePaths) > 0 {
					fmt.Fprintf(w, "photos without a face (%d; veil faces add PHOTO --box X,Y,W,H adds one the detector missed):\n", len(st.NoFacePaths))
					for _, p := range st.NoFacePaths {
						fmt.Fprintf(w, "  %s\n", p)
					}
				}
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

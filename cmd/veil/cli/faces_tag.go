package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/tagging"
)

// faceCommands lists the constructors of the `veil faces` subcommands (the
// faces of a library; `veil detect` and `veil embed` work on loose photos).
// Add a line here when adding one (in its own file).
var faceCommands = []func(*env) *cobra.Command{
	newFacesListCmd,
	newFacesNameCmd,
	newFacesRejectCmd,
	newFacesUnassignCmd,
	newFacesRemoveCmd,
	newFacesAddCmd,
	newFacesClustersCmd,
	newFacesShowCmd,
}

func newFacesCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "faces",
		Short: "List the faces of a library and say who they are",
		Long: `The faces commands work on the faces of a library (see veil library): list
them, name them, reject a suggested person, unassign or remove them. Faces are
named by their ids, as veil faces list prints them.

What you decide sticks: a face you name, unassign, remove or reject a person
for is never changed by anything automatic (suggestions accepted in bulk,
clustering, learning, re-indexing). Only you can change it again.

To find faces in loose photos without a library, see veil detect and veil embed.

` + exitStatusHelp,
		Example: `  veil faces list --library lib --unknown
  veil faces name 12 15 31 --person "Ada Lovelace" --library lib
  veil faces reject 40 --person "Ada Lovelace" --library lib
  veil faces remove 7 --library lib      # not a face at all`,
	}
	return addSubcommands(e, cmd, faceCommands)
}

// parseFaceIDs parses face ids given as arguments.
func parseFaceIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not a face id (a positive number, as veil faces list prints)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// withLibrary opens the library, runs f and closes it.
func withLibrary(e *env, lf *libraryFlags, f func(*tagging.Library) error) error {
	l, err := lf.open(e)
	if err != nil {
		return err
	}
	err = f(l)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

// jsonLibraryFace is a face in `veil faces list --json`.
type jsonLibraryFace struct {
	ID         int64       `json:"id"`
	Photo      string      `json:"photo"`
	Box        tagging.Box `json:"box"`
	Score      float64     `json:"score"`
	Person     *string     `json:"person"`
	Source     string      `json:"source"`
	AssignedBy string      `json:"assigned_by,omitempty"`
}

// toJSONLibraryFace converts a face for --json: person is null for a face
// nobody is assigned to.
func toJSONLibraryFace(f tagging.Face) jsonLibraryFace {
	jf := jsonLibraryFace{ID: f.ID, Photo: f.Photo, Box: f.Box, Score: f.Score,
		Source: string(f.Source), AssignedBy: f.AssignedBy}
	if f.PersonID != 0 {
		name := f.Person
		jf.Person = &name
	}
	return jf
}

// facesListHelp is veil faces list's --help.
const facesListHelp = `List prints the faces of the library (not those removed as false faces): id,
photo (the path as it was added), box, detector score, person and source
(detected, or manual for a face drawn by hand). --photo, --person and --unknown
(faces nobody is assigned to) select; at most one of them.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown photo or
person or bad input.`

func newFacesListCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var photo, person string
	var unknown, asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the faces of the library",
		Long:  facesListHelp,
		Example: `  veil faces list --library lib --unknown --json
  veil faces list --library lib --person "Ada Lovelace"
  veil faces list --library lib --photo ~/Pictures/2024/beach.jpg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, set := range []bool{photo != "", person != "", unknown} {
				if set {
					n++
				}
			}
			if n > 1 {
				return errors.New("give at most one of --photo, --person and --unknown")
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				filter := tagging.FaceFilter{Person: person, Unknown: unknown}
				if photo != "" {
					p, err := findPhoto(l, photo)
					if err != nil {
						return err
					}
					filter.Photo = p
				}
				fs, err := l.Faces(filter)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONList(e.stdout, "faces", fs, toJSONLibraryFace)
				}
				return writeTable(e.stdout, "FACE\tPERSON\tBOX\tSCORE\tSOURCE\tPHOTO", fs, func(f tagging.Face) string {
					who := f.Person
					if who == "" {
						who = "-"
					}
					return fmt.Sprintf("%d\t%s\t%.0f,%.0f,%.0f,%.0f\t%.2f\t%s\t%s", f.ID, who,
						f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height, f.Score, f.Source, f.Photo)
				}, plural(len(fs), "face"))
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&photo, "photo", "", "only the faces of this photo")
	cmd.Flags().StringVar(&person, "person", "", "only the faces of this person")
	cmd.Flags().BoolVar(&unknown, "unknown", false, "only the faces nobody is assigned to")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// findPhoto returns the path under which the library recorded a photo the
// user named: as typed, else as an absolute path.
// Only "not in the library" falls through to the next form: any other
// error (a damaged database) is returned as it is.
func findPhoto(l *tagging.Library, path string) (string, error) {
	candidates := []string{path}
	if abs, err := filepath.Abs(path); err == nil && abs != path {
		candidates = append(candidates, abs)
	}
	for _, p := range candidates {
		_, err := l.PhotoByPath(p)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, tagging.ErrUnknownPhoto) {
			return "", err
		}
	}
	return "", fmt.Errorf("%s: %w", path, tagging.ErrUnknownPhoto)
}

func newFacesNameCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var person string
	cmd := &cobra.Command{
		Use:   "name FACE... --person NAME",
		Short: "Say who the faces are (creating the person if new)",
		Long: `Name assigns the faces to the person NAME, creating the person if there is none
of that name (names are compared ignoring case and extra spaces). Your naming
replaces any earlier assignment and lifts an earlier rejection of NAME for these
faces; nothing automatic changes it later. Either all faces are named or, on an
unknown or removed face, none.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown or removed
face, an empty name or other bad input.`,
		Example: `  veil faces name 12 15 31 --person "Ada Lovelace" --library lib`,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseFaceIDs(args)
			if err != nil {
				return err
			}
			if person == "" {
				return errors.New("say who the faces are with --person NAME")
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				p, err := l.NameFaces(ids, person)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "named %s %s (%s in all)\n", plural(len(ids), "face"), p.Name, plural(p.Faces, "face"))
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&person, "person", "", "the person's name")
	return cmd
}

func newFacesRejectCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var person string
	cmd := &cobra.Command{
		Use:   "reject FACE... --person NAME",
		Short: "Say the faces are not this person (never suggested again)",
		Long: `Reject records that the faces are not NAME: they are never suggested or
automatically assigned to NAME again, and a face assigned to NAME loses that
assignment. Naming the face NAME later (veil faces name) lifts the rejection.
Either all faces are changed or, on any error, none.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown face or
person.`,
		Example: `  veil faces reject 31 --person "Ada Lovelace" --library lib`,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseFaceIDs(args)
			if err != nil {
				return err
			}
			if person == "" {
				return errors.New("say whom the faces are not with --person NAME")
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				if err := l.RejectFaces(ids, person); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "rejected %s for %s\n", person, plural(len(ids), "face"))
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&person, "person", "", "the person the faces are not")
	return cmd
}

// newFaceEditCmd builds a command that applies one operation to all the
// faces given, in one transaction of the library's (all or none). already
// says, of a face the operation would not change, what state it is in
// ("was already removed"), and "" of the others: those faces are reported
// so, not counted as changed.
func newFaceEditCmd(e *env, use, short, long, example, done string, op func(*tagging.Library, []int64) error, already func(tagging.Face) string) *cobra.Command {
	var lf libraryFlags
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseFaceIDs(args)
			if err != nil {
				return err
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				before, err := l.Faces(tagging.FaceFilter{IDs: ids, Removed: true})
				if err != nil {
					return err
				}
				if err := op(l, ids); err != nil {
					return err
				}
				changed := len(ids)
				for _, f := range before {
					if note := already(f); note != "" {
						fmt.Fprintf(e.stdout, "face %d %s\n", f.ID, note)
						changed--
					}
				}
				if changed > 0 {
					fmt.Fprintf(e.stdout, "%s %s\n", done, plural(changed, "face"))
				}
				return nil
			})
		},
	}
	lf.register(cmd)
	return cmd
}

func newFacesUnassignCmd(e *env) *cobra.Command {
	return newFaceEditCmd(e, "unassign FACE...", "Take the faces' person away",
		`Unassign makes the faces nobody's, as your decision: automatic assignment
leaves them so (a suggestion may still propose someone for you to confirm).
Either all faces are changed or, on any error, none.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown face.`,
		`  veil faces unassign 31 --library lib`,
		"unassigned", (*tagging.Library).UnassignFaces, func(f tagging.Face) string {
			switch {
			case f.Removed:
				return "was removed as a false face (unassigning changes nothing)"
			case f.PersonID == 0 && f.AssignedBy == tagging.ByUser:
				return "was already unassigned"
			}
			return ""
		})
}

func newFacesRemoveCmd(e *env) *cobra.Command {
	return newFaceEditCmd(e, "remove FACE...", "Remove false faces (not a face at all)",
		`Remove marks the faces as false detections: they lose their person and leave
listings, clusters and suggestions, and re-indexing does not bring them back.
The photo stays in the library. Either all faces are changed or, on any error,
none.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown face.`,
		`  veil faces remove 7 8 --library lib`,
		"removed", (*tagging.Library).RemoveFaces, func(f tagging.Face) string {
			if f.Removed {
				return "was already removed"
			}
			return ""
		})
}

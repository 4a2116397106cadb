package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/imaging"
	"github.com/veil-privacy/veil/tagging"
)

// facesShowHelp is veil faces show's --help.
const facesShowHelp = `Show writes a contact sheet (an image, --out, default faces.png) of face
thumbnails, each with its face id under it, so you can see who a face is
before naming it with veil faces name. Give face ids, or --cluster N (a
cluster as veil faces clusters printed it), or --person NAME (the faces
assigned to NAME, to check them); one of the three. Faces are shown in id
order, at most --limit of them.

The sheet shows faces of your photos in the clear: keep it where you keep
the photos, and delete it when done.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown face,
cluster or person, or bad input.`

func newFacesShowCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var out, person string
	var cluster, limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [FACE...]",
		Short: "Write a picture of faces with their ids, to see whom to name",
		Long:  facesShowHelp,
		Example: `  veil faces show 12 15 31 --library lib
  veil faces show --cluster 4 --out cluster4.png --library lib
  veil faces show --person "Ada Lovelace" --library lib`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseFaceIDs(args)
			if err != nil {
				return err
			}
			n := 0
			for _, set := range []bool{len(ids) > 0, cmd.Flags().Changed("cluster"), person != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				return errors.New("say which faces to show: face ids, --cluster N or --person NAME (one of them)")
			}
			if limit < 1 {
				return fmt.Errorf("--limit %d: want at least 1", limit)
			}
			format, err := imaging.FormatOf(out)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				switch {
				case cmd.Flags().Changed("cluster"):
					ids, err = l.ClusterFaces(cluster)
				case person != "":
					ids, err = l.PersonFaces(person)
				}
				if err != nil {
					return err
				}
				return writeFacesSheet(e, l, ids, limit, out, format, asJSON)
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&out, "out", "faces.png", "write the contact sheet to this file, PNG or JPEG as its extension (.png, .jpg, .jpeg) says")
	cmd.Flags().IntVar(&cluster, "cluster", 0, "show the faces of this cluster (as veil faces clusters lists them)")
	cmd.Flags().StringVar(&person, "person", "", "show the faces assigned to this person")
	cmd.Flags().IntVar(&limit, "limit", 200, "show at most this many faces (the first by id)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: the file written, the faces shown and how many were selected")
	return cmd
}

// writeFacesSheet writes the contact sheet of the first limit faces of ids
// to out (0600: it shows faces in the clear) and reports it.
func writeFacesSheet(e *env, l *tagging.Library, ids []int64, limit int, out string, format imaging.Format, asJSON bool) error {
	total := len(ids)
	ids = ids[:min(len(ids), limit)]
	sheet, err := l.ContactSheet(ids, imaging.DefaultSheetOptions())
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := sheet.Encode(&b, format); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e.stdout, map[string]any{"out": out, "faces": ids, "selected": total})
	}
	msg := fmt.Sprintf("wrote %s: %s", out, plural(len(ids), "face"))
	if total > len(ids) {
		msg += fmt.Sprintf(" of %d (--limit)", total)
	}
	fmt.Fprintln(e.stdout, msg)
	return nil
}

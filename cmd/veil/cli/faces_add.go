package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/face/nets"
	"github.com/veil-privacy/veil/tagging"
)

// facesAddHelp is veil faces add's --help.
const facesAddHelp = `Add records a face you point out in a photo of the library, where the
detector found none: --box gives its left, top, width and height in pixels of
the photo as displayed (EXIF orientation applied, as veil faces list prints
boxes). The face's 68 landmarks and descriptor are computed in that box, as for
a detected face, so it is matched and suggested like any other; it is listed
with source "manual" and score 0. With --person NAME it is named at once
(creating the person if new), as your decision.

The box must be at least 12 pixels on each side, lie in the photo (at most a
quarter of it outside) and not cover a face the photo already has (remove that
one first if it is wrong). The photo must be in the library (veil library add)
and unchanged since it was added.

Exit status: 0 when the face was added; 2 on a wrong passphrase; 1 on a
malformed box, a box outside the photo or over another face, a photo not in the
library, or bad input.`

func newFacesAddCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var box, person, models string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add PHOTO --box X,Y,W,H",
		Short: "Add a face the detector missed, by its box",
		Long:  facesAddHelp,
		Example: `  veil faces add --library lib ~/Pictures/party.jpg --box 410,120,96,110
  veil faces add --library lib party.jpg --box 410,120,96,110 --person "Ada Lovelace" --json`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if box == "" {
				return errors.New("give the face's box: --box X,Y,W,H (pixels)")
			}
			b, err := tagging.ParseBox(box)
			if err != nil {
				return fmt.Errorf("--box: %w", err)
			}
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				photo, err := findPhoto(l, args[0])
				if err != nil {
					return fmt.Errorf("%w (add it with veil library add)", err)
				}
				p, err := e.pipeline(tagging.PipelineOptions(models))
				if err != nil {
					return err
				}
				f, err := l.AddManualFace(cmd.Context(), p, photo, b, person)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, toJSONLibraryFace(f))
				}
				fmt.Fprintf(e.stdout, "added face %d to %s at %.0f,%.0f,%.0f,%.0f", f.ID, f.Photo, f.Box.X, f.Box.Y, f.Box.Width, f.Box.Height)
				if f.Person != "" {
					fmt.Fprintf(e.stdout, ", named %s", f.Person)
				}
				fmt.Fprintln(e.stdout)
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().StringVar(&box, "box", "", "the face's box: X,Y,W,H in pixels (left, top, width, height)")
	cmd.Flags().StringVar(&person, "person", "", "name the face as this person (created if new)")
	cmd.Flags().StringVar(&models, "models", "", "folder of face-api's weight files (default: $"+nets.EnvModels+", else models/ of the checkout)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

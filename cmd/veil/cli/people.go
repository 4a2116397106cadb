package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/veil-privacy/veil/tagging"
)

// peopleCommands lists the constructors of the `veil people` subcommands.
var peopleCommands = []func(*env) *cobra.Command{
	newPeopleListCmd,
	newPeopleRenameCmd,
	newPeopleMergeCmd,
	newPeopleHideCmd,
	newPeopleUnhideCmd,
	newPeopleCoverCmd,
	newPeoplePhotosCmd,
}

func newPeopleCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "people",
		Short: "The people named in a library: list, rename, merge, hide, photos",
		Long: `The people commands work on the people of a library (see veil library). A
person is created by naming faces (veil faces name FACE... --person NAME). Names
are compared ignoring case and extra spaces, and are stored encrypted.

` + exitStatusHelp,
		Example: `  veil people list --library lib
  veil people rename "Ada" "Ada Lovelace" --library lib
  veil people merge "Ada L." "Ada Lovelace" --library lib
  veil people photos "Ada Lovelace" --library lib`,
	}
	return addSubcommands(e, cmd, peopleCommands)
}

// jsonPerson is a person in `veil people list --json`.
type jsonPerson struct {
	Name   string `json:"name"`
	Faces  int    `json:"faces"`
	Hidden bool   `json:"hidden"`
	Cover  *int64 `json:"cover"`
}

func newPeopleListCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the people with their number of faces",
		Long: `List prints every person of the library (hidden ones too, marked), ordered by
name, with the number of faces assigned to them and their cover face.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on bad input.`,
		Example: `  veil people list --library lib --json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				ps, err := l.People()
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONList(e.stdout, "people", ps, func(p tagging.Person) jsonPerson {
						jp := jsonPerson{Name: p.Name, Faces: p.Faces, Hidden: p.Hidden}
						if p.Cover != 0 {
							c := p.Cover
							jp.Cover = &c
						}
						return jp
					})
				}
				return writeTable(e.stdout, "PERSON\tFACES\tCOVER\t", ps, func(p tagging.Person) string {
					cover, hidden := "-", ""
					if p.Cover != 0 {
						cover = strconv.FormatInt(p.Cover, 10)
					}
					if p.Hidden {
						hidden = "hidden"
					}
					return fmt.Sprintf("%s\t%d\t%s\t%s", p.Name, p.Faces, cover, hidden)
				}, plural(len(ps), "person", "people"))
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// newPersonCmd builds a people subcommand that takes exactly n arguments and
// runs op on the open library.
func newPersonCmd(e *env, use, short, long, example string, n int, op func(*env, *tagging.Library, []string) error) *cobra.Command {
	var lf libraryFlags
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(n),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error { return op(e, l, args) })
		},
	}
	lf.register(cmd)
	return cmd
}

func newPeopleRenameCmd(e *env) *cobra.Command {
	return newPersonCmd(e, "rename OLD NEW", "Rename a person",
		`Rename gives the person OLD the name NEW. If NEW already belongs to another
person, merge them instead (veil people merge).

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person, a
taken or empty name.`,
		`  veil people rename "Ada" "Ada Lovelace" --library lib`, 2,
		func(e *env, l *tagging.Library, a []string) error {
			if err := l.RenamePerson(a[0], a[1]); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "renamed")
			return nil
		})
}

func newPeopleMergeCmd(e *env) *cobra.Command {
	return newPersonCmd(e, "merge FROM INTO", "Merge two people who are one",
		`Merge moves every face and rejection of FROM to INTO and deletes FROM (INTO
keeps its name, cover and hidden state; it takes FROM's cover if it has none).
Where the two conflict, a face you named FROM but rejected for INTO becomes
INTO's, and a face given FROM automatically but rejected for INTO becomes
unknown.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person or
when FROM and INTO are the same person.`,
		`  veil people merge "Ada L." "Ada Lovelace" --library lib`, 2,
		func(e *env, l *tagging.Library, a []string) error {
			if err := l.MergePeople(a[0], a[1]); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "merged")
			return nil
		})
}

func newPeopleHideCmd(e *env) *cobra.Command {
	return newPersonCmd(e, "hide NAME", "Hide a person (kept, but not suggested)",
		`Hide marks the person hidden: kept with their faces, listed as hidden, and
left out of suggestions. veil people unhide undoes it.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person.`,
		`  veil people hide "Stranger at the beach" --library lib`, 1,
		func(e *env, l *tagging.Library, a []string) error {
			if err := l.SetHidden(a[0], true); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "hidden")
			return nil
		})
}

func newPeopleUnhideCmd(e *env) *cobra.Command {
	return newPersonCmd(e, "unhide NAME", "Show a hidden person again",
		`Unhide undoes veil people hide.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person.`,
		`  veil people unhide "Ada Lovelace" --library lib`, 1,
		func(e *env, l *tagging.Library, a []string) error {
			if err := l.SetHidden(a[0], false); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "shown")
			return nil
		})
}

func newPeopleCoverCmd(e *env) *cobra.Command {
	return newPersonCmd(e, "cover NAME FACE", "Choose the face that shows a person",
		`Cover makes FACE (one of the person's faces) the one that shows them.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person or
face, or a face that is not the person's.`,
		`  veil people cover "Ada Lovelace" 12 --library lib`, 2,
		func(e *env, l *tagging.Library, a []string) error {
			ids, err := parseFaceIDs(a[1:])
			if err != nil {
				return err
			}
			if err := l.SetCover(a[0], ids[0]); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "cover chosen")
			return nil
		})
}

// jsonPersonPhoto is a photo in `veil people photos --json`.
type jsonPersonPhoto struct {
	Path    string `json:"path"`
	Taken   string `json:"taken,omitempty"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Missing bool   `json:"missing"`
}

func newPeoplePhotosCmd(e *env) *cobra.Command {
	var lf libraryFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "photos NAME",
		Short: "List the photos a person is in",
		Long: `Photos lists the photos in which a face is assigned to the person, by path
(as added), with when they were taken.

Exit status: 0 on success; 2 on a wrong passphrase; 1 on an unknown person.`,
		Example: `  veil people photos "Ada Lovelace" --library lib --json`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withLibrary(e, &lf, func(l *tagging.Library) error {
				ps, err := l.PersonPhotos(args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSONList(e.stdout, "photos", ps, func(p tagging.Photo) jsonPersonPhoto {
						return jsonPersonPhoto{Path: p.Path, Taken: p.Taken,
							Width: p.Width, Height: p.Height, Missing: p.Missing}
					})
				}
				for _, p := range ps {
					fmt.Fprintln(e.stdout, p.Path)
				}
				return nil
			})
		},
	}
	lf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

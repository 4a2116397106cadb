package tagging

import "context"

// PersonByID returns the person with this id, or an error wrapping
// ErrUnknownPerson. It reads one row, where People reads them all (the web
// app looks people up by id on every page).
func (l *Library) PersonByID(id int64) (Person, error) {
	return l.personByID(context.Background(), id)
}

package serve

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's OpenAPI 3 document, written by hand; TestOpenAPI
// checks it against the registered routes both ways.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(openAPI)
}

package rest

import (
	_ "embed"
	"net/http"
	"slices"
)

// openAPIDocument is the OpenAPI 3.1 document of the REST API. It is written
// by hand and kept true by tests: the REST end-to-end tests validate every
// response they receive against it (package openapitest).
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI 3.1 document of the REST API.
func OpenAPIDocument() []byte { return slices.Clone(openAPIDocument) }

// openAPI serves the document; it needs no token (docs/api.md).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}

package graph

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/gqlerror"
)

// TestRequestErrorsAreBounded: a body gqlgen cannot decode is BAD_REQUEST,
// and neither the answer nor the log quotes the body (a secret in the
// variables would land in both).
func TestRequestErrorsAreBounded(t *testing.T) {
	var logged bytes.Buffer
	present := errorPresenter(slog.New(slog.NewTextHandler(&logged, nil)))
	for _, tc := range []struct{ name, message string }{
		{"not JSON", `json request body could not be decoded: invalid character 'x' looking for beginning of value body:x{"variables":{"secret":"s3cr3t"}}`},
		{"a JSON array", `json request body could not be decoded: json: cannot unmarshal array into Go value of type graphql.RawParams body:[{"query":"{me{name}}","variables":{"secret":"s3cr3t"}}]`},
		{"a long reason", strings.Repeat("x", 5000) + "s3cr3t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logged.Reset()
			got := present(context.Background(), gqlerror.Errorf("%s", tc.message))
			if got.Extensions["code"] != "BAD_REQUEST" || strings.Contains(got.Message, "s3cr3t") || len(got.Message) > 210 {
				t.Fatalf("presented %q %v", got.Message, got.Extensions)
			}
			if strings.Contains(logged.String(), "s3cr3t") || strings.Contains(logged.String(), "level=ERROR") || logged.Len() > 400 {
				t.Fatalf("logged %q", logged.String())
			}
		})
	}
}

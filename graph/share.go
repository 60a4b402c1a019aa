package graph

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/formatter"

	"github.com/mountd/mountd/core"
)

// shareKey lets sockets with equal event subscriptions share one execution
// (wsproto.Sharing): the key holds everything the results depend on, the
// account and the grant (which mounts the token may see), the selection
// and its variables. Every subscriber's rights are checked here, as the
// resolver would, because a socket joining a running execution does not run
// the resolver itself. Anything else runs per socket ("").
func (r *Resolver) shareKey(ctx context.Context, op *graphql.OperationContext) (string, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return "", nil // the resolver refuses it on its own
	}
	fields := graphql.CollectFields(op, op.Operation.SelectionSet, []string{"Subscription"})
	if len(fields) != 1 {
		return "", nil
	}
	args := fields[0].ArgumentMap(op.Variables)
	if after, ok := args["after"]; ok && after != nil {
		return "", nil // a replay is the socket's own
	}
	var uids []string
	switch fields[0].Name {
	case "mountStateChanged":
		uid, ok := args["uid"].(string)
		if !ok {
			return "", nil
		}
		uids = []string{uid}
	case "mountEvents":
		if v, present := args["uids"]; present && v != nil {
			list, ok := v.([]any)
			if !ok {
				return "", nil
			}
			uids = []string{}
			for _, item := range list {
				uid, ok := item.(string)
				if !ok {
					return "", nil
				}
				uids = append(uids, uid)
			}
		}
	default:
		return "", nil
	}
	if err := r.EventLog.Authorize(ctx, p, core.EventFilter{MountUIDs: uids}); err != nil {
		return "", err
	}
	key, err := json.Marshal(struct {
		Account   string
		Grant     core.Grant
		Selection string
		Variables map[string]any
	}{p.AccountID, p.Grant, selection(op), op.Variables})
	if err != nil {
		return "", nil
	}
	return string(key), nil
}

// selection is the operation as the executor sees it: the document
// formatted without its comments and layout, and the operation run. Texts
// that differ only there (each dashboard's own comment, its indentation)
// produce the same results, so they share one execution and one encoding
// of each event; aliases, fields, fragments and directives stay in.
func selection(op *graphql.OperationContext) string {
	var b strings.Builder
	formatter.NewFormatter(&b, formatter.WithCompacted()).FormatQueryDocument(op.Doc)
	b.WriteString("\x00")
	b.WriteString(op.Operation.Name)
	return b.String()
}

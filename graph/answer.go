package graph

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

// answerLimit bounds what one answer may grow to while it is resolved, and
// stops resolving an answer nobody waits for any more. The cost model
// bounds the number of values an operation asks for; this bounds their
// bytes (long names, many tags), and what an operation does once its
// client has gone.
//
// Each answer (each result of a subscription) gets a budget of bytes; every
// resolved field spends what it adds to the JSON, estimated as it resolves.
// Once the budget is spent, or the request's context has ended, the
// remaining fields resolve to null at once, without their resolvers and
// without an error each, and a spent budget replaces the answer with one
// RESPONSE_TOO_LARGE error.
type answerLimit struct{ max int64 }

type answerBudgetKey struct{}

type answerBudget struct {
	left     atomic.Int64
	stopped  atomic.Bool
	exceeded atomic.Bool
	cancel   context.CancelFunc
}

// stop makes the rest of the answer null and cancels the reads in flight.
func (b *answerBudget) stop() {
	b.stopped.Store(true)
	b.cancel()
}

func (answerLimit) ExtensionName() string                   { return "AnswerLimit" }
func (answerLimit) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptResponse gives the answer its budget.
func (l answerLimit) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &answerBudget{cancel: cancel}
	b.left.Store(l.max)
	resp := next(context.WithValue(ctx, answerBudgetKey{}, b))
	if resp != nil && b.exceeded.Load() {
		err := gqlerror.Errorf("the answer grew past the limit of %d bytes; ask for fewer items or fields", l.max)
		err.Extensions = map[string]any{"code": "RESPONSE_TOO_LARGE"}
		return &graphql.Response{Errors: gqlerror.List{err}}
	}
	return resp
}

// InterceptField spends the budget on each field's result.
func (l answerLimit) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	b, _ := ctx.Value(answerBudgetKey{}).(*answerBudget)
	if b == nil {
		return next(ctx)
	}
	if b.stopped.Load() {
		return graphql.Null, nil
	}
	if ctx.Err() != nil { // the client has gone, or the request's deadline
		b.stop()
		if err := core.DeadlineError(ctx); err != nil {
			return nil, err
		}
		return graphql.Null, nil
	}
	res, err := next(ctx)
	if err != nil {
		return res, err
	}
	n := int64(8) // "name": and a comma
	if fc := graphql.GetFieldContext(ctx); fc != nil {
		n += int64(len(fc.Field.Alias))
	}
	if b.left.Add(-(n + jsonSize(res))) < 0 {
		b.exceeded.Store(true)
		b.stop()
		return graphql.Null, nil
	}
	return res, nil
}

// jsonSize estimates the bytes a resolved value adds to the answer by
// itself: a scalar's text, a list's brackets and commas; an object's
// fields are counted as they resolve.
func jsonSize(v any) int64 {
	switch v := v.(type) {
	case nil:
		return 4
	case string:
		return int64(len(v)) + 2
	case *string:
		if v == nil {
			return 4
		}
		return int64(len(*v)) + 2
	case bool, *bool:
		return 5
	case int, *int, int64, float64, *float64:
		return 20
	case model.DateTime, *model.DateTime, time.Time:
		return 26
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Slice:
		return 2 + int64(rv.Len())
	case reflect.Map: // the JSON scalar (a command's data: small)
		return int64(len(fmt.Sprint(v)))
	}
	return 2
}

var _ interface {
	graphql.HandlerExtension
	graphql.ResponseInterceptor
	graphql.FieldInterceptor
} = answerLimit{}

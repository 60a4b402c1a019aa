package graph

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// operationTracing puts each GraphQL response in a span named by the
// operation's kind and first field ("graphql query mounts"): a query or
// mutation is one span, a subscription one per event it sends. The
// client's operation name is an attribute, cut short, never the span's
// name: a client may invent any number of them. gqlgen ships no OpenTelemetry
// extension; this one is all mountd needs.
type operationTracing struct{ tracer trace.Tracer }

// maxOperationNameAttr bounds the operation name a span carries.
const maxOperationNameAttr = 64

func newOperationTracing() operationTracing {
	return operationTracing{tracer: otel.Tracer("github.com/mountd/mountd/graph")}
}

func (operationTracing) ExtensionName() string                   { return "OperationTracing" }
func (operationTracing) Validate(graphql.ExecutableSchema) error { return nil }

func (t operationTracing) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	if !graphql.HasOperationContext(ctx) {
		return next(ctx)
	}
	oc := graphql.GetOperationContext(ctx)
	kind := "operation"
	if oc.Operation != nil {
		kind = string(oc.Operation.Operation)
	}
	name := "operation"
	if oc.Operation != nil && len(oc.Operation.SelectionSet) > 0 {
		// A field of the schema (validated by now), so the names are few.
		if f, ok := oc.Operation.SelectionSet[0].(*ast.Field); ok {
			name = f.Name
		}
	}
	opName := oc.OperationName
	if len(opName) > maxOperationNameAttr {
		opName = strings.ToValidUTF8(opName[:maxOperationNameAttr], "") // not a split character
	}
	ctx, span := t.tracer.Start(ctx, "graphql "+kind+" "+name, trace.WithAttributes(
		attribute.String("graphql.operation.type", kind), attribute.String("graphql.operation.name", opName)))
	defer span.End()
	res := next(ctx)
	if res != nil && len(res.Errors) > 0 {
		span.SetStatus(codes.Error, res.Errors[0].Message)
	}
	return res
}

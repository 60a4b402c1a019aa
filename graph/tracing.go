package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// operationTracing puts each GraphQL response in a span named by the
// operation ("graphql query mounts"): a query or mutation is one span, a
// subscription one per event it sends. gqlgen ships no OpenTelemetry
// extension; this one is all mountd needs.
type operationTracing struct{ tracer trace.Tracer }

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
	name := oc.OperationName
	if name == "" {
		name = "anonymous"
	}
	ctx, span := t.tracer.Start(ctx, "graphql "+kind+" "+name, trace.WithAttributes(
		attribute.String("graphql.operation.type", kind), attribute.String("graphql.operation.name", oc.OperationName)))
	defer span.End()
	res := next(ctx)
	if res != nil && len(res.Errors) > 0 {
		span.SetStatus(codes.Error, res.Errors[0].Message)
	}
	return res
}

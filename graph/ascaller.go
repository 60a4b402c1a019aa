package graph

import (
	"context"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

// asCaller runs a service call for the request's principal and converts
// its answer: the shape of most of the owner-only resolvers.
func asCaller[A, T, M any](ctx context.Context, arg A, call func(context.Context, core.Principal, A) (T, error), conv func(T) M) (M, error) {
	var zero M
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return zero, err
	}
	v, err := call(ctx, p, arg)
	if err != nil {
		return zero, err
	}
	return conv(v), nil
}

// pageAsCaller reads one page of a list for the request's principal and
// converts its items.
func pageAsCaller[T, M any](ctx context.Context, currentPage, pageSize *int,
	list func(context.Context, core.Principal, core.Page) ([]T, core.Pagination, error), conv func(T) M) ([]M, *model.Pagination, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, nil, err
	}
	pg, err := page(currentPage, pageSize, 20)
	if err != nil {
		return nil, nil, err
	}
	items, pagination, err := list(ctx, p, pg)
	if err != nil {
		return nil, nil, err
	}
	out := make([]M, len(items))
	for i, it := range items {
		out[i] = conv(it)
	}
	return out, toPagination(pagination), nil
}

// value drops the pointer of a conversion, for lists of values.
func value[T, M any](conv func(T) *M) func(T) M {
	return func(v T) M { return *conv(v) }
}

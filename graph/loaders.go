package graph

import (
	"context"
	"net/http"
	"time"

	"github.com/vikstrous/dataloadgen"

	"github.com/mountd/mountd/core"
)

type loadersKey struct{}

// loaders batch what a query asks for per item (a mount's tags) into one
// store call per request.
type loaders struct {
	mountTags *dataloadgen.Loader[string, []core.NfcTag]
}

func (r *Resolver) newLoaders(ctx context.Context) *loaders {
	return &loaders{
		mountTags: dataloadgen.NewMappedLoader(func(ctx context.Context, uids []string) (map[string][]core.NfcTag, error) {
			p, err := core.PrincipalFrom(ctx)
			if err != nil {
				return nil, err
			}
			tags, err := r.NfcService.TagsOfMounts(ctx, p, uids)
			if err != nil {
				return nil, err
			}
			for _, uid := range uids {
				if _, ok := tags[uid]; !ok {
					tags[uid] = []core.NfcTag{}
				}
			}
			return tags, nil
		}, dataloadgen.WithWait(time.Millisecond), dataloadgen.WithBatchCapacity(core.MaxPageSize),
			// Batch, never cache: a subscription lives as long as its socket
			// and must see tags as they are now.
			dataloadgen.WithoutCache()),
	}
}

// WithLoaders gives every request its own loaders, so nothing is cached
// across requests or callers.
func (r *Resolver) WithLoaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := context.WithValue(req.Context(), loadersKey{}, r.newLoaders(req.Context()))
		next.ServeHTTP(w, req.WithContext(ctx))
	})
}

// loaders returns the request's loaders, or a fresh set where a resolver
// runs outside the HTTP middleware.
func (r *Resolver) loaders(ctx context.Context) *loaders {
	if l, ok := ctx.Value(loadersKey{}).(*loaders); ok {
		return l
	}
	return r.newLoaders(ctx)
}

package graph

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vikstrous/dataloadgen"

	"github.com/mountd/mountd/core"
)

type loadersKey struct{}

// loaders batch what a query asks for per item (a mount's tags) into one
// store call per request.
type loaders struct {
	mountTags *dataloadgen.Loader[string, []core.NfcTag]

	// prefetched holds tags fetched for a whole list at once, so a page
	// costs one query however its resolvers are scheduled.
	mu         sync.Mutex
	prefetched map[string][]core.NfcTag
}

// tagsOf returns a mount's tags, from the list prefetch or the loader.
func (l *loaders) tagsOf(ctx context.Context, uid string) ([]core.NfcTag, error) {
	l.mu.Lock()
	tags, ok := l.prefetched[uid]
	l.mu.Unlock()
	if ok {
		return tags, nil
	}
	return l.mountTags.Load(ctx, uid)
}

func (l *loaders) prefetch(tags map[string][]core.NfcTag, uids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.prefetched == nil {
		l.prefetched = map[string][]core.NfcTag{}
	}
	for _, uid := range uids {
		l.prefetched[uid] = tags[uid]
	}
}

// prefetchTags loads the tags of a page of mounts in one call when the
// operation asks for them (the field at path under the current field).
func (r *Resolver) prefetchTags(ctx context.Context, uids []string, path ...string) error {
	if len(uids) == 0 || !selects(ctx, path...) {
		return nil
	}
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return err
	}
	tags, err := r.NfcService.TagsOfMounts(ctx, p, uids)
	if err != nil {
		return err
	}
	r.loaders(ctx).prefetch(tags, uids)
	return nil
}

// selects reports whether the current field's selection reaches path.
func selects(ctx context.Context, path ...string) bool {
	oc := graphql.GetOperationContext(ctx)
	fields := graphql.CollectFieldsCtx(ctx, nil)
	for i, name := range path {
		var next *graphql.CollectedField
		for j := range fields {
			if fields[j].Name == name {
				next = &fields[j]
				break
			}
		}
		if next == nil {
			return false
		}
		if i < len(path)-1 {
			fields = graphql.CollectFields(oc, next.Selections, nil)
		}
	}
	return true
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

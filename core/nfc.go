package core

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"time"
)

// MaxTagsPerSync is the API's limit on one synchronisation.
const MaxTagsPerSync = 200

// NfcTag is an NFC tag of an account, authorised on some of its mounts.
type NfcTag struct {
	UID       string // upper-case hex without colons
	AccountID string
	Name      string
	Color     string
	IconName  string
	MountUIDs []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NfcTagUpdate is a PATCH /nfc-tags/{uid}; nil leaves the field unchanged.
type NfcTagUpdate struct {
	Name     *string
	Color    *string
	IconName *string
}

// SyncResult is the answer to a synchronisation.
type SyncResult struct {
	MountUID string
	Added    int
	Removed  int
}

// TagStore persists NFC tags and their links to mounts.
type TagStore interface {
	// ListTags lists an account's tags by uid; with mountUIDs not nil, only
	// tags linked to one of them.
	ListTags(ctx context.Context, accountID string, mountUIDs []string, p Page) ([]NfcTag, int, error)
	// SyncTags makes the mount's authorised set exactly tagUIDs, creating
	// tags as needed, in one transaction. The mount must be ASSOCIATED and
	// owned by accountID: MOUNT_NOT_FOUND or MOUNT_NOT_ASSOCIATED otherwise.
	// The event (see MountStore) is appended when given.
	SyncTags(ctx context.Context, accountID, mountUID string, tagUIDs []string, now time.Time, e *Event) (added, removed int, err error)
	// UpdateTag applies u; NFC_TAG_NOT_FOUND when the account has no such tag.
	UpdateTag(ctx context.Context, accountID, uid string, u NfcTagUpdate, now time.Time) (NfcTag, error)
	// MountTagUIDs lists the tags accountID authorised on a mount, sorted
	// ascending; another account's links never show.
	MountTagUIDs(ctx context.Context, accountID, mountUID string) ([]string, error)
	// TagsOfMounts returns the tags of accountID authorised on each mount,
	// in one round trip whatever the number of mounts.
	TagsOfMounts(ctx context.Context, accountID string, mountUIDs []string) (map[string][]NfcTag, error)
}

// NfcService holds the rules of docs/api.md, "NFC tags".
type NfcService struct {
	tags   TagStore
	mounts MountStore
	waker  EventWaker
	logger *slog.Logger
	now    func() time.Time
}

// NewNfcService returns an NfcService over its ports.
func NewNfcService(tags TagStore, mounts MountStore, waker EventWaker, logger *slog.Logger) *NfcService {
	return &NfcService{tags: tags, mounts: mounts, waker: waker, logger: logger, now: time.Now}
}

var (
	colorPattern    = regexp.MustCompile(`^#[0-9A-Fa-f]{6}$`)
	iconNamePattern = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
)

// ListTags handles GET /nfc-tags: an owner or maintainer sees the account's
// tags, a token with mount items only the tags of its mounts.
func (s *NfcService) ListTags(ctx context.Context, p Principal, page Page) ([]NfcTag, Pagination, error) {
	if err := p.Authorize(ActionReadNfcTags); err != nil {
		return nil, Pagination{}, err
	}
	var mountUIDs []string
	if p.LimitedToMounts() {
		mountUIDs = p.MountUIDs
	}
	tags, total, err := s.tags.ListTags(ctx, p.AccountID, mountUIDs, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	for i := range tags {
		tags[i].MountUIDs = p.visibleMounts(tags[i].MountUIDs)
	}
	return tags, NewPagination(page, total), nil
}

// visibleMounts keeps, of uids, the mounts p may see: a tag linked to
// other mounts too must not tell a restricted token their uids.
func (p Principal) visibleMounts(uids []string) []string {
	if !p.LimitedToMounts() {
		return uids
	}
	out := make([]string, 0, len(uids))
	for _, uid := range uids {
		if p.CanSeeMount(uid) {
			out = append(out, uid)
		}
	}
	return out
}

// SyncTags handles POST /nfc-tags.
func (s *NfcService) SyncTags(ctx context.Context, p Principal, mountUID string, tagUIDs []string) (SyncResult, error) {
	// A mount outside a restricted token's items is 404 before the role is
	// considered (docs/api.md), as on every mount endpoint.
	authorize := p.Authorize(ActionWriteNfcTags)
	if mountUID != "" {
		authorize = p.AuthorizeMount(ActionWriteNfcTags, mountUID)
	}
	if authorize != nil {
		return SyncResult{}, authorize
	}
	if len(tagUIDs) > MaxTagsPerSync {
		return SyncResult{}, Errorf(CodePayloadTooLarge, "a synchronisation holds at most %d tags", MaxTagsPerSync)
	}
	var v Validation
	if mountUID == "" {
		v.Add("mountUid", "is required")
	} else if !ValidMountUID(mountUID) {
		v.Add("mountUid", "is not a mount uid")
	}
	seen := map[string]bool{}
	uids := make([]string, 0, len(tagUIDs))
	for i, t := range tagUIDs {
		if !ValidTagUID(t) {
			v.Add(fmt.Sprintf("tagUids[%d]", i), "must be a tag uid of 4, 7 or 10 bytes in hexadecimal")
			continue
		}
		n := NormalizeTagUID(t)
		if !seen[n] {
			seen[n] = true
			uids = append(uids, n)
		}
	}
	if err := v.Err(); err != nil {
		return SyncResult{}, err
	}
	if err := p.AuthorizeMount(ActionWriteNfcTags, mountUID); err != nil {
		return SyncResult{}, err
	}
	sort.Strings(uids)
	now := s.now().UTC().Truncate(time.Millisecond)
	ev := &Event{Type: EventNfcTagsSynced, UID: mountUID, AccountID: p.AccountID, OccurredAt: now}
	actx := byPrincipal(ctx, p, now, AuditNfcTagsSync, AuditTarget("mount", mountUID), map[string]any{"tagUids": uids})
	added, removed, err := s.tags.SyncTags(actx, p.AccountID, mountUID, uids, now, ev)
	if err != nil {
		return SyncResult{}, err
	}
	wake(ctx, s.waker, s.logger, ev)
	return SyncResult{MountUID: mountUID, Added: added, Removed: removed}, nil
}

// UpdateTag handles PATCH /nfc-tags/{uid}.
func (s *NfcService) UpdateTag(ctx context.Context, p Principal, uid string, u NfcTagUpdate) (NfcTag, error) {
	if err := p.Authorize(ActionWriteNfcTags); err != nil {
		return NfcTag{}, err
	}
	var v Validation
	if !ValidTagUID(uid) {
		return NfcTag{}, Errorf(CodeNfcTagNotFound, "NFC tag %q not found", uid)
	}
	checkText(&v, "name", u.Name, 100)
	if u.Color != nil && !colorPattern.MatchString(*u.Color) {
		v.Add("color", "must be #RRGGBB")
	}
	if u.IconName != nil && !iconNamePattern.MatchString(*u.IconName) {
		v.Add("iconName", "must be 1 to 64 characters of a-z, 0-9, '_' or '-'")
	}
	if err := v.Err(); err != nil {
		return NfcTag{}, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	tag := NormalizeTagUID(uid)
	details := setFields(map[string]any{}, map[string]*string{"name": u.Name, "color": u.Color, "iconName": u.IconName})
	return s.tags.UpdateTag(byPrincipal(ctx, p, now, AuditNfcTagUpdate, AuditTarget("nfc-tag", tag), details),
		p.AccountID, tag, u, now)
}

// TagsOfMounts returns the tags authorised on each of the mounts the
// principal may see (GraphQL batches Mount.nfcTags through it).
func (s *NfcService) TagsOfMounts(ctx context.Context, p Principal, mountUIDs []string) (map[string][]NfcTag, error) {
	if err := p.Authorize(ActionReadNfcTags); err != nil {
		return nil, err
	}
	visible := make([]string, 0, len(mountUIDs))
	for _, uid := range mountUIDs {
		if p.CanSeeMount(uid) {
			visible = append(visible, uid)
		}
	}
	if len(visible) == 0 {
		return map[string][]NfcTag{}, nil
	}
	byMount, err := s.tags.TagsOfMounts(ctx, p.AccountID, visible)
	if err != nil {
		return nil, err
	}
	for _, tags := range byMount {
		for i := range tags {
			tags[i].MountUIDs = p.visibleMounts(tags[i].MountUIDs)
		}
	}
	return byMount, nil
}

package core

import (
	"context"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/mountd/mountd/protocol"
)

// Offline access (CONTRACT §21). A rider grant is a right, signed with the
// association's owner key, that a rider's phone carries to the mount, which
// checks it alone, with no network. Revocations reach the mount as a signed
// list whose version and epoch never go back.

// GrantState is where a rider grant stands at a time.
type GrantState string

// The grant states.
const (
	GrantActive  GrantState = "ACTIVE"
	GrantRevoked GrantState = "REVOKED"
	GrantExpired GrantState = "EXPIRED"
)

// RightReleaseHelmet is the one right a grant carries today.
const RightReleaseHelmet = "RELEASE_HELMET"

// Bounds of grants (CONTRACT §21).
const (
	// MaxLiveGrantsPerMount is how many unexpired, unrevoked grants one
	// mount may have.
	MaxLiveGrantsPerMount = 1000
	// MaxLiveGrantsPerToken is how many live grants one restricted token
	// may have made.
	MaxLiveGrantsPerToken = 5
	// MaxRevocations is how many ids one signed revocation list holds; the
	// revocation that would overflow it raises the mount's epoch.
	MaxRevocations = 256
	// MaxOwnerGrantSpan is the longest grant an owner may make.
	MaxOwnerGrantSpan = 7 * 24 * time.Hour
	// DefaultGrantMaxTTL is MOUNTD_GRANT_MAX_TTL's default: how far ahead
	// of now a restricted token's grant may end.
	DefaultGrantMaxTTL = 12 * time.Hour
	// grantPastSlack is how far in the past notBefore may lie.
	grantPastSlack = 5 * time.Minute
	maxGrantLabel  = 100
)

// RiderGrant is one rider's grant on one mount.
type RiderGrant struct {
	ID        string
	UID       string
	AccountID string
	// RiderKey is the rider's P-256 public key, uncompressed SEC1, hex.
	RiderKey  string
	Rights    []string
	NotBefore time.Time
	NotAfter  time.Time
	// Epoch is the mount's revocation epoch the grant was signed at.
	Epoch     int64
	Label     string
	CreatedAt time.Time
	// CreatedBy is the creating token's client (or person) id; TokenID
	// the creating token, which bounds a restricted token's live grants.
	CreatedBy string
	TokenID   string
	// KeyID is the owner key that signed Text.
	KeyID     string
	Text      string
	Signature string
	RevokedAt time.Time // zero unless revoked
	// Uses counts the EXECUTED offline uses received; LastUsedAt is the
	// latest one's time.
	Uses       int
	LastUsedAt time.Time
}

// State is g's state at now.
func (g RiderGrant) State(now time.Time) GrantState {
	switch {
	case !g.RevokedAt.IsZero():
		return GrantRevoked
	case !now.Before(g.NotAfter):
		return GrantExpired
	default:
		return GrantActive
	}
}

// Live says whether g is unrevoked and unexpired at now.
func (g RiderGrant) Live(now time.Time) bool { return g.State(now) == GrantActive }

// GrantText is the text a grant's signature covers (CONTRACT §21).
func (g RiderGrant) GrantText() string {
	return protocol.BuildGrantText(protocol.Grant{UID: g.UID, ID: g.ID, RiderKey: g.RiderKey, Rights: g.Rights,
		NotBefore: g.NotBefore, NotAfter: g.NotAfter, Epoch: g.Epoch})
}

// GrantInput is what a client asks for.
type GrantInput struct {
	RiderKey  string
	Rights    *[]string // nil: [RELEASE_HELMET]
	NotBefore *time.Time
	NotAfter  *time.Time
	Label     *string
}

// GrantFilter narrows a grant listing; nil matches all.
type GrantFilter struct {
	State    *GrantState
	RiderKey *string
}

// GrantLimits are the bounds a store checks when it creates a grant, in the
// transaction that stores it.
type GrantLimits struct {
	PerMount int
	// PerToken bounds the live grants of the grant's TokenID; 0: none.
	PerToken int
}

// GrantSigner makes a grant's Text, Signature and KeyID with mount m's
// current owner key, for the store to call inside its transaction (the
// epoch is known only there).
type GrantSigner func(ctx context.Context, m Mount, g RiderGrant) (RiderGrant, error)

// Revocations are a mount's revocation state: the list a phone carries to
// the mount.
type Revocations struct {
	UID      string
	Version  int64
	Epoch    int64
	GrantIDs []string // sorted ascending
}

// GrantStore keeps rider grants and each mount's revocations.
type GrantStore interface {
	// CreateGrant stores g (its ID, UID, AccountID, RiderKey, Rights,
	// times, Label, creator set) in one transaction: the mount must be
	// ASSOCIATED to g.AccountID (MOUNT_NOT_FOUND for another account's or
	// an unknown uid, MOUNT_NOT_ASSOCIATED otherwise) and have a device
	// key (DEVICE_KEY_REQUIRED); a live grant of the same rider key on the
	// mount is revoked (a revocation like RevokeGrants', its event
	// returned in replaced) and past that more than lim's live grants is
	// CONFLICT. The grant takes the mount's epoch and is signed by sign.
	CreateGrant(ctx context.Context, g RiderGrant, lim GrantLimits, now time.Time, sign GrantSigner) (created RiderGrant, replaced []*Event, err error)
	// RiderGrant returns accountID's grant id (GRANT_NOT_FOUND).
	RiderGrant(ctx context.Context, accountID, id string) (RiderGrant, error)
	// ListRiderGrants lists accountID's grants, on mount uid unless uid is
	// "", newest first, narrowed by f at now.
	ListRiderGrants(ctx context.Context, accountID, uid string, f GrantFilter, now time.Time, p Page) ([]RiderGrant, int, error)
	// The audit entry ctx carries (WithAudit) is recorded with each grant
	// created or revoked, its target the grant; an epoch rise that signs
	// grants again records AuditGrantResign for the mount.
	//
	// RevokeGrants revokes accountID's live grants among ids (or, with
	// riderKey not "", every live grant of that rider key) at now, and
	// appends and returns a GRANT_REVOKED event for each (Event.Grant the
	// grant as revoked); others are left as they are. Each mount's
	// version rises once; a revocation that would take the mount's list
	// past MaxRevocations raises its epoch too, lists only the revocations
	// of the new epoch, and signs the mount's live grants again with it
	// (sign). A store may revoke on many mounts in several transactions:
	// on failure it returns the events of those committed with the error.
	RevokeGrants(ctx context.Context, accountID string, ids []string, riderKey string, now time.Time, sign GrantSigner) ([]*Event, error)
	// Revocations returns mount uid's revocation state at now: its version
	// and epoch (1 and 1 for a mount never revoked on), and the revoked
	// grants of its epoch whose NotAfter has not passed.
	Revocations(ctx context.Context, uid string, now time.Time) (Revocations, error)
	// ResignGrants signs mount uid's live grants whose key is not its
	// current owner key's again with it (sign), in one transaction, and
	// records the audit entry ctx carries when it signed any.
	ResignGrants(ctx context.Context, uid string, now time.Time, sign GrantSigner) (int, error)
	// LastRevocation is when a grant of mount uid was last revoked (one, a
	// rider's, a replaced one; not those ended with their association);
	// zero for never.
	LastRevocation(ctx context.Context, uid string) (time.Time, error)
	// DatabaseTime is the database server's clock.
	DatabaseTime(ctx context.Context) (time.Time, error)
	// RecordOfflineUses stores uses (commands with GrantID, of their
	// grants' accounts) of mount uid in one transaction, in order: a use
	// whose id is stored already is a duplicate; a new one appends
	// event(use), with Command set, and a new EXECUTED one adds one to its
	// grant's Uses and moves its LastUsedAt to the use's time if later.
	RecordOfflineUses(ctx context.Context, uid string, uses []Command, event OfflineUseEvent) ([]StoredUse, error)
	// SetMountOffline keeps o as mount uid's Offline while the mount is
	// in accountID's live association (else it changes nothing).
	SetMountOffline(ctx context.Context, accountID, uid string, o MountOffline) error
	// MountsBehindRevocations counts the associated mounts whose told
	// revocation version (none told: 0) is below their version, among
	// mounts with a revocation made.
	MountsBehindRevocations(ctx context.Context) (int, error)
	// PastDeviceKeys lists the device keys mount uid had before its
	// current one (kept when a claim or a delete replaced them), newest
	// first, at most MaxPastDeviceKeys.
	PastDeviceKeys(ctx context.Context, uid string) ([]string, error)
}

// MaxPastDeviceKeys bounds the earlier device keys an offline receipt is
// checked against: a uid whose hardware changed more often than that is
// not a mount's life.
const MaxPastDeviceKeys = 16

// Grant codes beyond the shared ones.
const (
	CodeGrantNotFound     = protocol.CodeGrantNotFound
	CodeDeviceKeyRequired = protocol.CodeDeviceKeyRequired
)

// GrantDeps are what GrantService needs.
type GrantDeps struct {
	Grants GrantStore
	Mounts MountStore
	Signer Signer
	// MaxTTL is MOUNTD_GRANT_MAX_TTL; 0: DefaultGrantMaxTTL.
	MaxTTL GrantMaxTTL
	// Waker is told of the events of stored offline uses.
	Waker  EventWaker
	Logger *slog.Logger
}

// GrantMaxTTL is MOUNTD_GRANT_MAX_TTL.
type GrantMaxTTL time.Duration

// GrantService creates, lists and revokes rider grants, and signs what
// the mount checks offline: grants, revocation lists and time.
type GrantService struct {
	GrantDeps
	now func() time.Time
}

// NewGrantService returns a GrantService over its ports.
func NewGrantService(d GrantDeps) *GrantService {
	if d.MaxTTL <= 0 {
		d.MaxTTL = GrantMaxTTL(DefaultGrantMaxTTL)
	}
	return &GrantService{GrantDeps: d, now: time.Now}
}

// SetClock replaces the service's clock (tests).
func (s *GrantService) SetClock(now func() time.Time) { s.now = now }

func (s *GrantService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// sign is the GrantSigner of the service: text and signature with m's key.
func (s *GrantService) sign(ctx context.Context, m Mount, g RiderGrant) (RiderGrant, error) {
	g.Text = g.GrantText()
	sig, err := s.Signer.Sign(ctx, m.UID, m.Key, []byte(g.Text))
	if err != nil {
		return RiderGrant{}, err
	}
	g.Signature, g.KeyID = hex.EncodeToString(sig), m.Key.ID
	return g, nil
}

// ValidRiderKey says whether key is a P-256 point, uncompressed SEC1, hex.
func ValidRiderKey(key string) bool {
	_, err := protocol.ParseRiderKey(key)
	return err == nil
}

// Create makes a grant on mount uid for p (CONTRACT §21).
func (s *GrantService) Create(ctx context.Context, p Principal, uid string, in GrantInput) (RiderGrant, error) {
	if err := p.AuthorizeMount(ActionCreateGrant, uid); err != nil {
		return RiderGrant{}, err
	}
	restricted := p.Role == RoleRestricted
	if restricted && !p.LimitedToMounts() {
		return RiderGrant{}, Errorf(CodeForbidden, "maintainer tokens read grants; they do not create them")
	}
	if err := s.CheckRiderToken(ctx, p, uid); err != nil {
		return RiderGrant{}, err
	}
	now := s.clock()
	g, err := s.checkInput(in, now, restricted)
	if err != nil {
		return RiderGrant{}, err
	}
	g.ID, g.UID, g.AccountID, g.CreatedAt, g.CreatedBy, g.TokenID = "gr_"+randomHex(12), uid, p.AccountID, now, p.ClientID, p.TokenID
	lim := GrantLimits{PerMount: MaxLiveGrantsPerMount}
	if restricted {
		lim.PerToken = MaxLiveGrantsPerToken
	}
	actx := byPrincipal(ctx, p, now, AuditGrantCreate, AuditTarget("grant", g.ID),
		map[string]any{"uid": uid, "riderKey": g.RiderKey, "notBefore": FormatTime(g.NotBefore), "notAfter": FormatTime(g.NotAfter)})
	created, replaced, err := s.Grants.CreateGrant(actx, g, lim, now, s.sign)
	if err != nil {
		return RiderGrant{}, err
	}
	if m, ok := s.Waker.(GrantMeter); ok {
		m.GrantIssued()
	}
	s.wakeAll(ctx, replaced)
	return created, nil
}

// checkInput validates in at now; restricted tokens get the shorter bound.
func (s *GrantService) checkInput(in GrantInput, now time.Time, restricted bool) (RiderGrant, error) {
	var v Validation
	g := RiderGrant{Rights: []string{RightReleaseHelmet}, NotBefore: now}
	g.RiderKey = strings.ToLower(in.RiderKey)
	if !ValidRiderKey(g.RiderKey) {
		v.Add("riderKey", "must be a P-256 public key: the uncompressed SEC1 point in hex (130 characters, starting 04)")
	}
	if in.Rights != nil && !slices.Equal(*in.Rights, []string{RightReleaseHelmet}) {
		v.Add("rights", "must be [\"RELEASE_HELMET\"] (the only right a grant carries)")
	}
	if in.NotBefore != nil {
		g.NotBefore = in.NotBefore.UTC().Truncate(time.Millisecond)
		if g.NotBefore.Before(now.Add(-grantPastSlack)) {
			v.Add("notBefore", "may be at most 5 minutes in the past")
		}
	}
	switch {
	case in.NotAfter == nil:
		v.Add("notAfter", "is required")
	default:
		g.NotAfter = in.NotAfter.UTC().Truncate(time.Millisecond)
		switch {
		case !g.NotAfter.After(now):
			v.Add("notAfter", "must be in the future")
		case !g.NotAfter.After(g.NotBefore):
			v.Add("notAfter", "must be after notBefore")
		case restricted && g.NotAfter.After(now.Add(time.Duration(s.MaxTTL))):
			v.Add("notAfter", "may be at most %s from now for this token", time.Duration(s.MaxTTL))
		case g.NotAfter.Sub(g.NotBefore) > MaxOwnerGrantSpan:
			v.Add("notAfter", "may be at most 7 days after notBefore")
		}
	}
	if in.Label != nil {
		g.Label = *in.Label
		if len([]rune(g.Label)) > maxGrantLabel || strings.ContainsFunc(g.Label, unicode.IsControl) {
			v.Add("label", "must be at most 100 characters, without control characters")
		}
	}
	return g, v.Err()
}

// Grant returns grant id as p may see it.
func (s *GrantService) Grant(ctx context.Context, p Principal, id string) (RiderGrant, error) {
	if err := p.Authorize(ActionReadGrants); err != nil {
		return RiderGrant{}, err
	}
	g, err := s.Grants.RiderGrant(ctx, p.AccountID, id)
	if err != nil {
		return RiderGrant{}, err
	}
	if !p.CanSeeMount(g.UID) {
		return RiderGrant{}, Errorf(CodeGrantNotFound, "grant %q not found", id)
	}
	if p.LimitedToMounts() {
		g.Label = ""
	}
	return g, nil
}

// List lists the grants of mount uid (all of the account's with uid "",
// which needs a rider key and an owner token).
func (s *GrantService) List(ctx context.Context, p Principal, uid string, f GrantFilter, page Page) ([]RiderGrant, Pagination, error) {
	var err error
	if uid == "" {
		err = p.Authorize(ActionManageGrants)
	} else {
		err = p.AuthorizeMount(ActionReadGrants, uid)
	}
	if err != nil {
		return nil, Pagination{}, err
	}
	var v Validation
	if f.RiderKey != nil {
		k := strings.ToLower(*f.RiderKey)
		f.RiderKey = &k
		if !ValidRiderKey(k) {
			v.Add("riderKey", "must be a P-256 public key: the uncompressed SEC1 point in hex")
		}
	} else if uid == "" || p.LimitedToMounts() {
		v.Add("riderKey", "is required")
	}
	if f.State != nil && !slices.Contains([]GrantState{GrantActive, GrantRevoked, GrantExpired}, *f.State) {
		v.Add("state", "must be ACTIVE, REVOKED or EXPIRED")
	}
	if err := v.Err(); err != nil {
		return nil, Pagination{}, err
	}
	grants, total, err := s.Grants.ListRiderGrants(ctx, p.AccountID, uid, f, s.clock(), page)
	if err != nil {
		return nil, Pagination{}, err
	}
	if p.LimitedToMounts() {
		for i := range grants {
			grants[i].Label = ""
		}
	}
	return grants, NewPagination(page, total), nil
}

// Revoke revokes grant id (owner tokens); revoking it again, or an expired
// one, answers it unchanged.
func (s *GrantService) Revoke(ctx context.Context, p Principal, id string) (RiderGrant, error) {
	if err := p.Authorize(ActionManageGrants); err != nil {
		return RiderGrant{}, err
	}
	now := s.clock()
	actx := byPrincipal(ctx, p, now, AuditGrantRevoke, AuditTarget("grant", id), nil)
	revoked, err := s.Grants.RevokeGrants(actx, p.AccountID, []string{id}, "", now, s.sign)
	s.wakeAll(ctx, revoked)
	if err != nil {
		return RiderGrant{}, err
	}
	if len(revoked) == 1 {
		return *revoked[0].Grant, nil
	}
	return s.Grants.RiderGrant(ctx, p.AccountID, id)
}

// RevokeRider revokes every live grant of riderKey in p's account and
// returns those revoked now.
func (s *GrantService) RevokeRider(ctx context.Context, p Principal, riderKey string) ([]RiderGrant, error) {
	if err := p.Authorize(ActionManageGrants); err != nil {
		return nil, err
	}
	key := strings.ToLower(riderKey)
	if !ValidRiderKey(key) {
		var v Validation
		v.Add("riderKey", "must be a P-256 public key: the uncompressed SEC1 point in hex")
		return nil, v.Err()
	}
	now := s.clock()
	actx := byPrincipal(ctx, p, now, AuditGrantRevoke, "", map[string]any{"riderKey": key})
	revoked, err := s.Grants.RevokeGrants(actx, p.AccountID, nil, key, now, s.sign)
	// A store may revoke in several transactions: those done before a
	// failure are told to the feeds, and a retry revokes the rest.
	s.wakeAll(ctx, revoked)
	if err != nil {
		return nil, err
	}
	out := make([]RiderGrant, len(revoked))
	for i, e := range revoked {
		out[i] = *e.Grant
	}
	return out, nil
}

// wakeAll tells the event feeds of events the store appended.
func (s *GrantService) wakeAll(ctx context.Context, events []*Event) {
	if s.Waker == nil {
		return
	}
	for _, e := range events {
		wake(ctx, s.Waker, s.Logger, e)
	}
}

// SignedText is a text the mount checks and its signature by the
// association's owner key (lowercase hex).
type SignedText struct {
	Text      string
	Signature string
}

// maxClockSkew is how far the server's clock may be from the database's
// for it to sign time.
const maxClockSkew = 2 * time.Second

// ownedMount returns uid when p's account holds it ASSOCIATED: what the
// owner key signs for.
func (s *GrantService) ownedMount(ctx context.Context, p Principal, a Action, uid string) (Mount, error) {
	if err := p.AuthorizeMount(a, uid); err != nil {
		return Mount{}, err
	}
	m, err := s.Mounts.Mount(ctx, uid)
	if err != nil {
		return Mount{}, err
	}
	if m.OwnerID != p.AccountID {
		return Mount{}, Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	if m.State != StateAssociated {
		return Mount{}, Errorf(CodeMountNotAssociated, "mount %q is not associated", uid)
	}
	return m, nil
}

func (s *GrantService) signText(ctx context.Context, m Mount, text string) (SignedText, error) {
	sig, err := s.Signer.Sign(ctx, m.UID, m.Key, []byte(text))
	if err != nil {
		return SignedText{}, err
	}
	return SignedText{Text: text, Signature: hex.EncodeToString(sig)}, nil
}

// RevocationList is mount uid's signed revocation list, for any token
// that may query the mount's commands.
func (s *GrantService) RevocationList(ctx context.Context, p Principal, uid string) (SignedText, error) {
	m, err := s.ownedMount(ctx, p, ActionQueryCommand, uid)
	if err != nil {
		return SignedText{}, err
	}
	r, err := s.Grants.Revocations(ctx, uid, s.clock())
	if err != nil {
		return SignedText{}, err
	}
	return s.signText(ctx, m, protocol.BuildRevocationsText(protocol.Revocations{UID: uid, Version: r.Version,
		Epoch: r.Epoch, GrantIDs: r.GrantIDs}))
}

// TimeToken signs the server's time for mount uid's challenge nonce. A
// server whose clock is more than 2 s from the database's signs nothing:
// 503, so that a wrong clock never reaches mounts.
func (s *GrantService) TimeToken(ctx context.Context, p Principal, uid, nonce string) (SignedText, error) {
	if !protocol.ValidNonce(nonce) {
		var v Validation
		v.Add("nonce", "must be 32 lowercase hex characters, as the mount gave it")
		return SignedText{}, v.Err()
	}
	m, err := s.ownedMount(ctx, p, ActionQueryCommand, uid)
	if err != nil {
		return SignedText{}, err
	}
	dbNow, err := s.Grants.DatabaseTime(ctx)
	if err != nil {
		return SignedText{}, err
	}
	now := s.clock()
	if skew := now.Sub(dbNow); skew > maxClockSkew || skew < -maxClockSkew {
		return SignedText{}, &Error{Code: CodeUnavailable, Message: "the server's clock disagrees with the database's; it signs no time until they agree",
			RetryAfter: UnavailableRetry}
	}
	return s.signText(ctx, m, protocol.BuildTimeText(uid, now, nonce))
}

// ResignGrants signs mount uid's live grants again with its current owner
// key (core.GrantResigner): its association continues under a new key. The
// audit entry ctx carries (grant.resign) is recorded when any was signed.
func (s *GrantService) ResignGrants(ctx context.Context, uid string) error {
	_, err := s.Grants.ResignGrants(ctx, uid, s.clock(), s.sign)
	return err
}

// CheckRiderToken refuses a token limited to its mounts that was issued
// before the last revocation on mount uid (FORBIDDEN): a rider's token
// from before its grant was revoked neither queries the mount's commands
// nor creates grants on it. Other tokens, and tokens without iat, pass.
func (s *GrantService) CheckRiderToken(ctx context.Context, p Principal, uid string) error {
	if !p.LimitedToMounts() || p.IssuedAt.IsZero() {
		return nil
	}
	r, err := s.Grants.LastRevocation(ctx, uid)
	if err != nil {
		return err
	}
	// iat is in seconds: a token of the revocation's second counts as
	// before it unless its second is past the revocation's.
	if !r.IsZero() && p.IssuedAt.Truncate(time.Second).UnixMilli() < r.UnixMilli() {
		return Errorf(CodeForbidden, "this token was issued before a revocation on mount %q: get a new token", uid)
	}
	return nil
}

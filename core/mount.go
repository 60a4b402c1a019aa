package core

import (
	"context"
	"math"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mountd/mountd/protocol"
)

// AssociationState is where a mount stands in its association lifecycle.
type AssociationState string

// The association states (docs/api.md, "Mount lifecycle").
const (
	StateInactive   AssociationState = "INACTIVE"
	StateIdle       AssociationState = "IDLE"
	StateAssociated AssociationState = "ASSOCIATED"
)

// Mount is a helmet-locking device installed on a vehicle.
type Mount struct {
	UID              string
	Name             string
	SerialNumber     string
	MACAddress       string
	FirmwareRevision string
	SoftwareRevision string
	ModelNumber      string
	State            AssociationState
	// OwnerID is the owning account; empty while INACTIVE.
	OwnerID string
	// ExpiredOwnerID is the account whose confirmation window lapsed, kept
	// so that its late confirm answers 410 until the mount is claimed again.
	ExpiredOwnerID string
	IdleDeadline   time.Time // zero unless IDLE
	AssociatedAt   time.Time // zero until confirmed
	Key            MountKey  // zero while INACTIVE
	// DevicePublicKey is the mount's own Ed25519 key (64 lowercase hex),
	// pinned at association; empty for older firmware.
	DevicePublicKey string
	// AssociationStartedAt is when the current association began: the
	// claim of the unknown or INACTIVE uid (a claim of the owner during
	// its own association keeps it). Commands generated before it belong
	// to an earlier association (docs/api.md, "The truth from the mount").
	// Zero for associations begun before it was recorded.
	AssociationStartedAt time.Time
	// LastSeenAt is the server's time of the last accepted report or
	// receipt upload of the current association (zero: never); Presence
	// is computed from it when the mount is read (docs/api.md, "Presence and
	// alarms").
	LastSeenAt time.Time
	Presence   Presence
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Latest     LatestStates
	// Offline is what a phone last told of the mount's offline access;
	// nil until one did during the current association.
	Offline *MountOffline
}

// MountOffline is a mount's offline-access state as its info
// characteristic showed it to a phone, which uploaded it with the mount's
// offline log (CONTRACT §21). It is not signed: it feeds the console and
// mountd_mounts_behind_revocations, never a decision.
type MountOffline struct {
	RevocationVersion int64
	LogPending        int
	TimeTrusted       bool
	// At is the server's time of the upload that told it.
	At time.Time
}

// MaxLogPending bounds a told logPending: a mount's log holds at most 256
// EXECUTED receipts and one REFUSED per grant and reason, far below it.
const MaxLogPending = 1 << 20

// Lapsed says whether m is IDLE with its window passed at now. The window
// is in the row, so a lapsed mount counts as INACTIVE for every rule
// whether or not the expiry worker has run yet.
func (m Mount) Lapsed(now time.Time) bool {
	return m.State == StateIdle && !m.IdleDeadline.After(now)
}

// MaxHandoverKeys bounds HandoverKeys, so the signatures of one hand-over
// (protocol.MaxHandoverSignatures).
const MaxHandoverKeys = protocol.MaxHandoverSignatures

// MountKey is an association's Ed25519 key pair; the private half is sealed
// under the master key and never leaves the signing adapter in the clear.
type MountKey struct {
	ID               string
	PublicKey        []byte
	SealedPrivateKey string
}

// MountFields are the descriptive fields a client sets with POST /mounts;
// nil leaves the stored value.
type MountFields struct {
	Name             *string
	SerialNumber     *string
	MACAddress       *string
	FirmwareRevision *string
	SoftwareRevision *string
	ModelNumber      *string
	// DevicePublicKey is what the mount's info characteristic says
	// (docs/api.md, "The truth from the mount"); nil keeps the key pinned
	// before by the owner's own association, and starts a new association (a
	// claim of an unknown or INACTIVE uid) without one.
	DevicePublicKey *string
}

// MountUpdate is a PATCH /mounts/{uid}; nil leaves the field unchanged.
type MountUpdate struct {
	Name             *string
	SoftwareRevision *string
}

// MountFilter narrows a mount listing; filters match exactly, MACAddress
// case-insensitively.
type MountFilter struct {
	MACAddress   *string
	MountUID     *string
	SerialNumber *string
	// UIDs, when not nil, limits the listing to these mounts (a restricted
	// token's mount items).
	UIDs []string
	// Expression is a fleet filter's text as a client gave it; the
	// services parse it into Expr (stores read Expr only).
	Expression string
	// Expr, when not nil, narrows the listing as a fleet filter
	// (docs/api.md, "Fleet filter"); OfflineCut is then the lastSeenAt at
	// or before which a mount is OFFLINE (now minus the offline threshold).
	Expr       *FilterExpr
	OfflineCut time.Time
}

// Page asks for one page of a list.
type Page struct {
	CurrentPage int
	PageSize    int
}

// NewPage checks a list's page parameters, nil when not given, adding what
// is wrong to v under the parameters' names, and returns the page. Every
// transport builds its pages here, so the rules and their wording are one.
func NewPage(currentPage, pageSize *int, defaultSize int, v *Validation) Page {
	p := Page{CurrentPage: 1, PageSize: defaultSize}
	if currentPage != nil {
		if *currentPage < 1 {
			v.Add("currentPage", "must be an integer of at least 1")
		} else {
			p.CurrentPage = *currentPage
		}
	}
	if pageSize != nil {
		if *pageSize < 1 || *pageSize > MaxPageSize {
			v.Add("pageSize", "must be an integer from 1 to %d", MaxPageSize)
		} else {
			p.PageSize = *pageSize
		}
	}
	return p
}

// MaxOffset is the largest offset a list query is given: the storage
// layer takes 32-bit offsets, and no list holds that many items, so a page
// further out is past the end all the same (an empty page, docs/api.md, "Conventions").
const MaxOffset = math.MaxInt32

// Offset is the number of items before the page, at most MaxOffset. It is
// computed without overflow for any page number.
func (p Page) Offset() int {
	if p.CurrentPage < 1 || p.PageSize < 1 {
		return 0
	}
	if p.CurrentPage-1 > MaxOffset/p.PageSize {
		return MaxOffset
	}
	return (p.CurrentPage - 1) * p.PageSize
}

// Pagination describes a page of a list (every list response carries one).
type Pagination struct {
	CurrentPage int `json:"currentPage"`
	PageSize    int `json:"pageSize"`
	TotalItems  int `json:"totalItems"`
	TotalPages  int `json:"totalPages"`
}

// NewPagination computes the pagination object for a page of total items.
func NewPagination(p Page, total int) Pagination {
	pages := 0
	if total > 0 {
		pages = (total + p.PageSize - 1) / p.PageSize
	}
	return Pagination{CurrentPage: p.CurrentPage, PageSize: p.PageSize, TotalItems: total, TotalPages: pages}
}

// MaxPageSize is the largest page any list serves.
const MaxPageSize = 100

var macPattern = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`)

// ValidateMountFields checks POST /mounts fields and normalises the MAC
// address to upper case.
func ValidateMountFields(uid string, f *MountFields) error {
	var v Validation
	if !ValidMountUID(uid) {
		v.Add("uid", "is required: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'")
	}
	if f.MACAddress != nil {
		if !macPattern.MatchString(*f.MACAddress) {
			v.Add("macAddress", "must be six colon-separated hexadecimal byte pairs, like AA:BB:CC:DD:EE:FF")
		} else {
			upper := strings.ToUpper(*f.MACAddress)
			f.MACAddress = &upper
		}
	}
	checkText(&v, "name", f.Name, 100)
	checkText(&v, "serialNumber", f.SerialNumber, 100)
	checkText(&v, "firmwareRevision", f.FirmwareRevision, 64)
	checkText(&v, "softwareRevision", f.SoftwareRevision, 64)
	checkText(&v, "modelNumber", f.ModelNumber, 64)
	if f.DevicePublicKey != nil {
		switch {
		case *f.DevicePublicKey == "":
			// As if not given: the key pinned before stays.
			f.DevicePublicKey = nil
		case !protocol.ValidPublicKey(*f.DevicePublicKey):
			v.Add("devicePublicKey", "must be an Ed25519 public key: 64 lowercase hexadecimal characters")
		}
	}
	return v.Err()
}

// ValidateMountUpdate checks a PATCH /mounts/{uid} body.
func ValidateMountUpdate(u MountUpdate) error {
	var v Validation
	checkText(&v, "name", u.Name, 100)
	checkText(&v, "softwareRevision", u.SoftwareRevision, 64)
	return v.Err()
}

// checkText is the rule of every free text a client gives (names,
// descriptions, reasons): valid UTF-8 of at most max characters without
// control characters (C0, DEL and C1), which would otherwise reach
// terminals and logs as they are.
func checkText(v *Validation, field string, s *string, max int) {
	if s == nil {
		return
	}
	if !utf8.ValidString(*s) {
		v.Add(field, "must be valid UTF-8 text")
		return
	}
	if utf8.RuneCountInString(*s) > max {
		v.Add(field, "must be at most %d characters", max)
	}
	if strings.IndexFunc(*s, unicode.IsControl) >= 0 {
		v.Add(field, "must not contain control characters")
	}
}

// MountStore persists mounts. Each lifecycle method is one conditional write
// that checks what it assumes, so transitions are race-free across replicas.
//
// A method given an event (e not nil) appends it to the event log in the
// transaction of its change, and only when the change happens, completing
// it: its ID, and the Mount as the change left it, with the latest values
// of e.AccountID's association.
type MountStore interface {
	// ClaimMount makes accountID the owner of uid: it creates an unknown
	// uid, takes an INACTIVE mount, or refreshes one accountID already owns
	// (an IDLE mount restarts its window, an ASSOCIATED one stays so). The
	// fields given overwrite stored ones and key replaces the key.
	// MOUNT_ALREADY_OWNED when another account owns it, and when its
	// IDLE window has lapsed by c.Now (whoever owns it): that association
	// has to be expired first, with its event. A successful claim keeps
	// c.Key among the uid's hand-over keys (HandoverKeys) in its
	// transaction.
	ClaimMount(ctx context.Context, c Claim, e *Event) (Mount, error)
	// ConfirmAssociation turns an IDLE mount of accountID whose deadline is
	// after now into ASSOCIATED; ok is false (and the mount as stored is
	// returned, or MOUNT_NOT_FOUND) when the row did not qualify. In the
	// same transaction the association's key, if a claim kept it, becomes
	// the uid's confirmed hand-over key and the keys kept before it go.
	ConfirmAssociation(ctx context.Context, uid, accountID string, now time.Time, e *Event) (m Mount, ok bool, err error)
	// HandoverKeys lists the owner keys mount uid may hold, whose
	// signatures make the next ASSOCIATE_OWNER's hand-over (docs/api.md,
	// "Commands"): the last confirmed association's key first, then
	// the keys claimed after it, oldest first; when there are more, the
	// newest MaxHandoverKeys-1 of those. Keys outlive their association,
	// its account and the mount's record (abandon, expiry, delete); none
	// for a uid never claimed.
	HandoverKeys(ctx context.Context, uid string) ([]MountKey, error)
	// ExpireAssociation turns uid INACTIVE if it is IDLE with a deadline at
	// or before now, clearing owner and key; ok says whether it changed.
	// The event's AccountID is set to the owner that lost the mount.
	ExpireAssociation(ctx context.Context, uid string, now time.Time, e *Event) (m Mount, ok bool, err error)
	// AbandonMount turns a mount of accountID INACTIVE, keeping record and
	// history. MOUNT_NOT_FOUND when accountID does not own it.
	AbandonMount(ctx context.Context, uid, accountID string, now time.Time, e *Event) (Mount, error)
	// DeleteMount removes a mount of accountID with its states, tag links and
	// commands. MOUNT_NOT_FOUND when accountID does not own it.
	DeleteMount(ctx context.Context, uid, accountID string, e *Event) (Mount, error)
	// RekeyMount replaces the key of a mount accountID owns.
	RekeyMount(ctx context.Context, uid, accountID string, key MountKey, now time.Time) (Mount, error)
	// UpdateMount applies u to a mount of accountID. MOUNT_NOT_FOUND when
	// accountID does not own it.
	UpdateMount(ctx context.Context, uid, accountID string, u MountUpdate, now time.Time) (Mount, error)
	// Mount returns a mount as stored, whoever owns it, without its
	// computed fields. MOUNT_NOT_FOUND when the uid is unknown.
	Mount(ctx context.Context, uid string) (Mount, error)
	// MountWithLatest is Mount with the computed fields (Latest) read in
	// the same statement. MOUNT_NOT_FOUND when the uid is unknown.
	MountWithLatest(ctx context.Context, uid string) (Mount, error)
	// ListMounts lists the mounts accountID owns, ordered by uid, with
	// their computed fields (Latest) read in the same call. An IDLE mount
	// whose window lapsed by now is not listed, expired or not.
	ListMounts(ctx context.Context, accountID string, f MountFilter, p Page, now time.Time) ([]Mount, int, error)
	// IdleDeadlines lists every IDLE mount's deadline, so that a scheduler
	// can recover after a restart.
	IdleDeadlines(ctx context.Context) ([]Deadline, error)
	// LapsedIdle lists up to limit IDLE mounts whose window lapsed by now,
	// for the sweep that catches up on deadlines the scheduler missed.
	LapsedIdle(ctx context.Context, now time.Time, limit int) ([]string, error)
}

// Claim is one POST /mounts.
type Claim struct {
	UID       string
	AccountID string
	Fields    MountFields
	Key       MountKey
	Now       time.Time
	Deadline  time.Time
	// Command, when set, is stored in the claim's transaction if the claim
	// succeeds (the ASSOCIATE_OWNER it answers with): a claim is never
	// acknowledged without its command, and it costs no round trip of its own.
	Command *Command
}

// Deadline is when an IDLE mount's window lapses.
type Deadline struct {
	UID string
	At  time.Time
}

// TimeLayout is the API's date-time output: UTC with milliseconds.
const TimeLayout = protocol.TimeLayout

// FormatTime renders t in the API's date-time text.
func FormatTime(t time.Time) string { return protocol.FormatTime(t) }

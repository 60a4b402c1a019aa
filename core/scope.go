package core

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/mountd/mountd/protocol"
)

// Role is what a token may do within its account.
type Role string

// The two roles a token can carry (docs/api.md, "Identity").
const (
	RoleOwner      Role = "owner"
	RoleRestricted Role = "restricted"
)

// Scope items with fixed text.
const (
	ScopeOpenID  = "openid"
	ScopeSub     = "sub"
	ScopeProfile = "profile"

	scopeRolePrefix  = "role:"
	scopeMountPrefix = "mount:"
)

// mountUIDPattern is the API's shape of a mount uid (docs/api.md, "Mount lifecycle").
var mountUIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// ValidMountUID reports whether uid has the API's shape.
func ValidMountUID(uid string) bool { return mountUIDPattern.MatchString(uid) }

// ScopeRules knows the deployment-specific audience item and parses the scope
// items of a token request or of a token.
type ScopeRules struct {
	IDPName   string
	ProjectID string
}

// AudienceItem is the mandatory scope item naming the service project.
func (r ScopeRules) AudienceItem() string { return protocol.AudienceItem(r.IDPName, r.ProjectID) }

// Grant is what a set of scope items allows.
type Grant struct {
	// Complete is true when every mandatory item is present; a token without
	// them is issued but carries no rights.
	Complete  bool
	Role      Role
	MountUIDs []string
	Scopes    []string
}

// Parse reads scope items. An unknown or malformed item is an error (the
// identity provider answers invalid_scope); missing mandatory items are not.
func (r ScopeRules) Parse(items []string) (Grant, error) {
	g := Grant{Role: RoleOwner, Scopes: []string{}, MountUIDs: []string{}}
	var haveOpenID, haveSub, haveAud, haveRole bool
	seenMount := map[string]bool{}
	for _, item := range items {
		if item == "" {
			continue
		}
		switch {
		case item == ScopeOpenID:
			haveOpenID = true
		case item == ScopeSub:
			haveSub = true
		case item == ScopeProfile:
		case item == r.AudienceItem():
			haveAud = true
		case strings.HasPrefix(item, scopeRolePrefix):
			role := Role(strings.TrimPrefix(item, scopeRolePrefix))
			if role != RoleOwner && role != RoleRestricted {
				return Grant{}, fmt.Errorf("unknown role %q", role)
			}
			if haveRole && role != g.Role {
				return Grant{}, fmt.Errorf("conflicting role items")
			}
			haveRole, g.Role = true, role
		case strings.HasPrefix(item, scopeMountPrefix):
			uid := strings.TrimPrefix(item, scopeMountPrefix)
			if !ValidMountUID(uid) {
				return Grant{}, fmt.Errorf("malformed mount item %q", item)
			}
			if !seenMount[uid] {
				seenMount[uid] = true
				g.MountUIDs = append(g.MountUIDs, uid)
			}
		default:
			return Grant{}, fmt.Errorf("unknown scope item %q", item)
		}
		if !contains(g.Scopes, item) {
			g.Scopes = append(g.Scopes, item)
		}
	}
	sort.Strings(g.MountUIDs)
	g.Complete = haveOpenID && haveSub && haveAud
	return g, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

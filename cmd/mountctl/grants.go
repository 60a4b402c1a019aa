package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
)

// grantView is a rider grant as the API shows it (docs/api.md, "Offline
// access").
type grantView struct {
	ID         string   `json:"id"`
	UID        string   `json:"uid"`
	RiderKey   string   `json:"riderKey"`
	Rights     []string `json:"rights"`
	NotBefore  string   `json:"notBefore"`
	NotAfter   string   `json:"notAfter"`
	Epoch      int64    `json:"epoch"`
	Label      *string  `json:"label"`
	CreatedAt  string   `json:"createdAt"`
	RevokedAt  *string  `json:"revokedAt"`
	Text       string   `json:"text"`
	Signature  string   `json:"signature"`
	Uses       int      `json:"uses"`
	LastUsedAt *string  `json:"lastUsedAt"`
}

// state is where the grant stands at now: REVOKED once revoked, EXPIRED
// once past notAfter, else ACTIVE (also before notBefore).
func (g grantView) state(now time.Time) string {
	if g.RevokedAt != nil {
		return "REVOKED"
	}
	if na, err := time.Parse(time.RFC3339Nano, g.NotAfter); err == nil && !now.Before(na) {
		return "EXPIRED"
	}
	return "ACTIVE"
}

// shortKey shows a rider key by its first and last 8 characters (--json
// prints it whole).
func shortKey(k string) string {
	if len(k) <= 20 {
		return k
	}
	return k[:8] + "…" + k[len(k)-8:]
}

// line prints the grant on one line: id, state, mount, rider key, uses,
// validity, epoch, label.
func (g grantView) line(now time.Time) string {
	used := "never used"
	if g.LastUsedAt != nil {
		used = "last used " + *g.LastUsedAt
	}
	line := fmt.Sprintf("%s  %-7s %s  rider %s  uses %d (%s)  %s → %s  epoch %d", g.ID, g.state(now), g.UID, shortKey(g.RiderKey),
		g.Uses, used, g.NotBefore, g.NotAfter, g.Epoch)
	if g.RevokedAt != nil {
		line += "  revoked " + *g.RevokedAt
	}
	if g.Label != nil && *g.Label != "" {
		line += fmt.Sprintf("  %q", *g.Label)
	}
	return line
}

// grantStates are the states `grants list --state` takes.
var grantStates = []string{"ACTIVE", "REVOKED", "EXPIRED"}

// grantsQuery builds the query of `grants list`: with --uid a mount's
// grants (GET /mounts/{uid}/grants), else the account's grants of one
// rider (GET /grants?riderKey=, which needs --rider-key).
func grantsQuery(uid, state, riderKey string, page, pageSize int) (string, error) {
	q := url.Values{"currentPage": {fmt.Sprint(page)}, "pageSize": {fmt.Sprint(pageSize)}}
	if riderKey != "" {
		q.Set("riderKey", riderKey)
	}
	if state != "" {
		state = strings.ToUpper(state)
		valid := false
		for _, s := range grantStates {
			valid = valid || s == state
		}
		if !valid {
			return "", fmt.Errorf("--state %q: give ACTIVE, REVOKED or EXPIRED", state)
		}
		q.Set("state", state)
	}
	if uid != "" {
		return "/mounts/" + url.PathEscape(uid) + "/grants?" + q.Encode(), nil
	}
	if riderKey == "" {
		return "", errors.New("give --uid (a mount's grants) or --rider-key (a rider's grants in the account)")
	}
	if state != "" {
		return "", errors.New("--state needs --uid: a rider's grants in the account are listed whatever their state")
	}
	return "/grants?" + q.Encode(), nil
}

// grantWindow reads create's --not-before, --not-after and --ttl into the
// body's notBefore and notAfter (RFC 3339, UTC): --ttl counts from
// --not-before when given, else from now.
func grantWindow(notBefore, notAfter string, ttl time.Duration, now time.Time) (map[string]any, error) {
	body := map[string]any{}
	start := now
	if notBefore != "" {
		t, err := time.Parse(time.RFC3339Nano, notBefore)
		if err != nil {
			return nil, fmt.Errorf("--not-before %q: give an RFC 3339 date-time (2026-12-01T08:00:00Z)", notBefore)
		}
		start = t
		body["notBefore"] = t.UTC().Format(time.RFC3339Nano)
	}
	switch {
	case (notAfter == "") == (ttl == 0):
		return nil, errors.New("give --not-after or --ttl (one of them)")
	case ttl < 0:
		return nil, fmt.Errorf("--ttl %s: give a positive duration (12h)", ttl)
	case ttl > 0:
		body["notAfter"] = start.Add(ttl).UTC().Format(time.RFC3339Nano)
	default:
		t, err := time.Parse(time.RFC3339Nano, notAfter)
		if err != nil {
			return nil, fmt.Errorf("--not-after %q: give an RFC 3339 date-time (2026-12-01T20:00:00Z)", notAfter)
		}
		body["notAfter"] = t.UTC().Format(time.RFC3339Nano)
	}
	return body, nil
}

func grantsCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "grants",
		Usage: "riders' offline access to mounts: list, create, revoke",
		Commands: []*cli.Command{
			{
				Name: "list", Usage: "list a mount's grants (--uid), or a rider's grants in the account (--rider-key alone, owners), newest first",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "uid", Usage: "the mount's grants"},
					&cli.StringFlag{Name: "state", Usage: "ACTIVE, REVOKED or EXPIRED (with --uid)"},
					&cli.StringFlag{Name: "rider-key", Usage: "only this rider's grants (the P-256 public key in hex)"},
				}, pageFlags...),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					path, err := grantsQuery(cmd.String("uid"), cmd.String("state"), cmd.String("rider-key"), cmd.Int("page"), cmd.Int("page-size"))
					if err != nil {
						return err
					}
					var page struct {
						Grants     []grantView    `json:"grants"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, path, &page); err != nil {
						return err
					}
					now := time.Now()
					return out.print(page, func(o io.Writer) {
						for _, g := range page.Grants {
							fmt.Fprintln(o, g.line(now))
						}
						pageFooter(o, page.Pagination, "", "grants", "")
					})
				},
			},
			{
				Name: "create", Usage: "grant a rider offline access to a mount (owners: at most 7 days; a rider's token: at most 12 h)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "uid", Required: true, Usage: "the mount"},
					&cli.StringFlag{Name: "rider-key", Required: true, Usage: "the rider's P-256 public key: the uncompressed point in hex (130 characters, 04…)"},
					&cli.StringFlag{Name: "not-after", Usage: "when the grant ends, RFC 3339 (or --ttl)"},
					&cli.DurationFlag{Name: "ttl", Usage: "how long the grant lasts from --not-before or now (12h; or --not-after)"},
					&cli.StringFlag{Name: "not-before", Usage: "when the grant starts, RFC 3339 (at most 5 minutes back; default now)"},
					&cli.StringFlag{Name: "label", Usage: "a name for the grant (at most 100 characters)"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					body, err := grantWindow(cmd.String("not-before"), cmd.String("not-after"), cmd.Duration("ttl"), time.Now())
					if err != nil {
						return err
					}
					body["riderKey"] = cmd.String("rider-key")
					if cmd.IsSet("label") {
						body["label"] = cmd.String("label")
					}
					var g grantView
					if err := s.call(ctx, http.MethodPost, "/mounts/"+url.PathEscape(cmd.String("uid"))+"/grants", body, &g); err != nil {
						return err
					}
					return out.print(g, func(o io.Writer) { fmt.Fprintln(o, g.line(time.Now())) })
				},
			},
			{
				Name: "revoke", Usage: "revoke a grant by its id, or every live grant of a rider in the account (--rider-key) (owners)", ArgsUsage: "[ID]",
				Flags: []cli.Flag{&cli.StringFlag{Name: "rider-key", Usage: "revoke every live grant of this rider key instead of one grant"}},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					byKey := cmd.IsSet("rider-key")
					if byKey == (cmd.Args().Len() == 1) || cmd.Args().Len() > 1 {
						return errors.New("give the grant's id or --rider-key (one of them)")
					}
					if !byKey {
						var g grantView
						if err := s.call(ctx, http.MethodPost, "/grants/"+url.PathEscape(cmd.Args().First())+"/revoke", nil, &g); err != nil {
							return err
						}
						return out.print(g, func(o io.Writer) { fmt.Fprintln(o, g.line(time.Now())) })
					}
					var res struct {
						Grants []grantView `json:"grants"`
					}
					if err := s.call(ctx, http.MethodPost, "/grants/revoke", map[string]any{"riderKey": cmd.String("rider-key")}, &res); err != nil {
						return err
					}
					now := time.Now()
					return out.print(res, func(o io.Writer) {
						for _, g := range res.Grants {
							fmt.Fprintln(o, g.line(now))
						}
						fmt.Fprintf(o, "%d grants revoked\n", len(res.Grants))
					})
				},
			},
		},
	}
}

// Command mountctl is the operator and field tool of mountd: tokens, mounts
// over the API, and the phone's side of the flow (scan, connect, release a
// helmet over BLE) through the SDK, plus a live view of a mount's states.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand(os.Stdout, os.Stderr).Run(ctx, os.Args); err != nil {
		fmt.Fprintln(terminalText{w: os.Stderr}, "mountctl:", err)
		os.Exit(1)
	}
}

// settings are the global flags.
type settings struct {
	API          string
	Token        string
	ClientID     string
	ClientSecret string
	IDPName      string
	ProjectID    string
	BLE          string
	QueueDir     string
	JSON         bool
	Timeout      time.Duration

	client *client.Client // made once: one renewing token source per run
}

func newCommand(stdout, stderr io.Writer) *cli.Command {
	s := &settings{}
	out := &printer{w: stdout, json: &s.JSON}
	return &cli.Command{
		Name:    "mountctl",
		Version: version.String(),
		Usage:   "operate mounts: tokens, the mount API, and BLE actions through the SDK",
		Writer:  stdout,
		// Progress and errors: text of the server's among them.
		ErrWriter: terminalText{w: stderr},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "api", Value: "http://127.0.0.1:8080", Usage: "mountd's address (the identity provider's issuer too)", Sources: cli.EnvVars("MOUNTCTL_API"), Destination: &s.API},
			&cli.StringFlag{Name: "token", Usage: "access token (from mountctl token)", Sources: cli.EnvVars("MOUNTCTL_TOKEN"), Destination: &s.Token},
			// Global, so that without --token every command gets and renews
			// its own owner token (watch and events --follow outlive one).
			&cli.StringFlag{Name: "client-id", Usage: "the account's client id: without --token, mountctl gets and renews its own owner token", Sources: cli.EnvVars("MOUNTCTL_CLIENT_ID"), Destination: &s.ClientID},
			&cli.StringFlag{Name: "client-secret", Usage: "its secret (prefer the variable: ps shows flags)", Sources: cli.EnvVars("MOUNTCTL_CLIENT_SECRET"), Destination: &s.ClientSecret},
			// The audience item of the server's scope rules (MOUNTD_IDP_NAME,
			// MOUNTD_PROJECT_ID): every token mountctl asks for names them.
			&cli.StringFlag{Name: "idp-name", Value: "mountd", Usage: "the <idp> of the audience scope item (the server's MOUNTD_IDP_NAME)", Sources: cli.EnvVars("MOUNTCTL_IDP_NAME"), Destination: &s.IDPName},
			&cli.StringFlag{Name: "project-id", Value: "mountd", Usage: "the project id of the audience scope item (the server's MOUNTD_PROJECT_ID)", Sources: cli.EnvVars("MOUNTCTL_PROJECT_ID"), Destination: &s.ProjectID},
			&cli.StringFlag{Name: "ble", Value: "sim://127.0.0.1:7390", Usage: "BLE radio: sim://HOST:PORT (mountsim's simulated radio) or bluez (this machine's adapter)", Sources: cli.EnvVars("MOUNTCTL_BLE"), Destination: &s.BLE},
			// Off by default: one mountctl at a time may hold a queue, and
			// parallel runs (scripts) would refuse each other.
			&cli.StringFlag{Name: "queue-dir", Usage: "keep what a mount said (signed states, receipts) that could not reach the API in this directory and upload it on the next run; without it a failed upload is an error", Sources: cli.EnvVars("MOUNTCTL_QUEUE_DIR"), Destination: &s.QueueDir},
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts", Destination: &s.JSON},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "overall time limit of a command", Destination: &s.Timeout},
		},
		Commands: []*cli.Command{
			tokenCommand(s, out),
			mountsCommand(s, out),
			scanCommand(s, out),
			connectCommand(s, out),
			releaseCommand(s, out),
			syncCommand(s, out),
			watchCommand(s, out),
			eventsCommand(s, out),
			auditCommand(s, out),
			webhooksCommand(s, out),
			firmwareCommand(s, out),
			exportCommand(s, out),
			alarmsCommand(s, out),
			alarmRulesCommand(s, out),
			jobsCommand(s, out),
			rolloutsCommand(s, out),
			grantsCommand(s, out),
		},
	}
}

// printer prints human text, or JSON with --json, through terminalText:
// the server's data in either cannot drive the terminal.
type printer struct {
	w    io.Writer
	json *bool
}

func (p *printer) print(v any, human func(w io.Writer)) error {
	if *p.json {
		enc := json.NewEncoder(terminalText{w: p.w, json: true})
		return enc.Encode(v)
	}
	human(terminalText{w: p.w})
	return nil
}

func (s *settings) requireToken() error {
	if s.Token == "" && (s.ClientID == "" || s.ClientSecret == "") {
		return errors.New("a token is needed: pass --token or set MOUNTCTL_TOKEN (see `mountctl token`), or set MOUNTCTL_CLIENT_ID and MOUNTCTL_CLIENT_SECRET")
	}
	return nil
}

func (s *settings) apiBase() string { return strings.TrimRight(s.API, "/") + "/api/v1" }

// pageFooter ends a listed page: "page 2 of 3, 45 rules" (prefix names
// which list when a command prints two), or for an empty list what it is:
// empty when given ("no deliveries yet"), else "0 rules", never "page 1 of 0".
func pageFooter(w io.Writer, pagination map[string]int, prefix, noun, empty string) {
	switch {
	case pagination["totalItems"] > 0:
		fmt.Fprintf(w, "%spage %d of %d, %d %s\n", prefix, pagination["currentPage"], pagination["totalPages"], pagination["totalItems"], noun)
	case empty != "":
		fmt.Fprintln(w, empty)
	default:
		fmt.Fprintf(w, "0 %s\n", noun)
	}
}

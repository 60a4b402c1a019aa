package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/sdk"
)

func firmwareCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "firmware",
		Usage: "firmware of the catalogue: list, check, download; install over BLE",
		Commands: []*cli.Command{{
			Name:  "list",
			Usage: "list the catalogue's versions (deprecated ones too)",
			Flags: []cli.Flag{&cli.StringFlag{Name: "model", Usage: "this model only"},
				&cli.IntFlag{Name: "page", Value: 1}, &cli.IntFlag{Name: "page-size", Value: 10}},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				q := url.Values{"currentPage": {fmt.Sprint(cmd.Int("page"))}, "pageSize": {fmt.Sprint(cmd.Int("page-size"))}}
				if m := cmd.String("model"); m != "" {
					q.Set("modelNumber", m)
				}
				var page struct {
					Versions   []firmwareVersion `json:"versions"`
					Pagination map[string]int    `json:"pagination"`
				}
				if err := s.pageCall(ctx, "/firmware/versions?"+q.Encode(), &page); err != nil {
					return err
				}
				return out.print(page, func(w io.Writer) {
					for _, v := range page.Versions {
						fmt.Fprintln(w, v.line())
					}
					pageFooter(w, page.Pagination, "", "versions", "")
				})
			},
		}, {
			Name:  "check",
			Usage: "whether a model at a revision has an update",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "model", Usage: "model number", Required: true},
				&cli.StringFlag{Name: "revision", Usage: "the installed software revision (default: none, so the latest is offered)"},
				&cli.StringFlag{Name: "mount", Usage: "the mount asking, by uid: rollouts decide what it is offered"},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				q := url.Values{"modelNumber": {cmd.String("model")}}
				if r := cmd.String("revision"); r != "" {
					q.Set("softwareRevision", r)
				}
				if m := cmd.String("mount"); m != "" {
					q.Set("mountUid", m)
				}
				var res struct {
					Code    string           `json:"code"`
					Version *firmwareVersion `json:"version,omitempty"`
				}
				if err := s.call(ctx, http.MethodGet, "/firmware/check-update?"+q.Encode(), nil, &res); err != nil {
					return err
				}
				return out.print(res, func(w io.Writer) {
					if res.Version == nil {
						fmt.Fprintln(w, res.Code)
						return
					}
					fmt.Fprintf(w, "%s: %s\n", res.Code, res.Version.line())
				})
			},
		}, {
			Name:  "download",
			Usage: "download a firmware file, checking its SHA-256 and size",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "model", Usage: "model number", Required: true},
				&cli.StringFlag{Name: "revision", Usage: "software revision (default: the latest)"},
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "file to write", Required: true},
				&cli.BoolFlag{Name: "force", Usage: "overwrite the file if it exists"},
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				q := url.Values{"modelNumber": {cmd.String("model")}}
				if r := cmd.String("revision"); r != "" {
					q.Set("softwareRevision", r)
				}
				var d struct {
					Version struct {
						ModelNumber      string `json:"modelNumber"`
						SoftwareRevision string `json:"softwareRevision"`
						SHA256           string `json:"sha256"`
						Size             int64  `json:"size"`
					} `json:"version"`
					DownloadLink string `json:"downloadLink"`
				}
				if err := s.call(ctx, http.MethodGet, "/firmware/download?"+q.Encode(), nil, &d); err != nil {
					return err
				}
				path := cmd.String("output")
				if err := download(ctx, d.DownloadLink, path, d.Version.SHA256, d.Version.Size, cmd.Bool("force"), newProgress(d.Version.Size)); err != nil {
					return err
				}
				result := map[string]any{"file": path, "modelNumber": d.Version.ModelNumber,
					"softwareRevision": d.Version.SoftwareRevision, "sha256": d.Version.SHA256, "size": d.Version.Size}
				return out.print(result, func(w io.Writer) {
					fmt.Fprintf(w, "%s %s: %d bytes, sha256 %s verified, written to %s\n",
						d.Version.ModelNumber, d.Version.SoftwareRevision, d.Version.Size, d.Version.SHA256, path)
				})
			},
		}, firmwareInstallCommand(s, out)},
	}
}

// download fetches link into path through a temporary file in the same
// folder, renamed only once size and SHA-256 match: a failed or tampered
// download never leaves a file that looks complete. show, when not nil,
// counts the bytes as they come.
func download(ctx context.Context, link, path, wantSHA256 string, wantSize int64, force bool, show *progress) error {
	if !force {
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%s exists; pass --force to overwrite it", path)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return err
	}
	// The link is signed and may take long on a slow line: no client
	// timeout beyond the command's own (--timeout).
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("download: %s", res.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".firmware-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing left to remove
	h := sha256.New()
	// One byte more than announced tells a longer file from a complete one.
	dst := io.MultiWriter(tmp, h)
	if show != nil {
		dst = io.MultiWriter(tmp, h, show)
	}
	n, err := io.Copy(dst, io.LimitReader(res.Body, wantSize+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if n != wantSize {
		return fmt.Errorf("download: %d bytes, the catalogue says %d; nothing written", n, wantSize)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA256 {
		return errors.New("download: the SHA-256 does not match the catalogue's; nothing written")
	}
	return os.Rename(tmp.Name(), path)
}

// firmwareVersion is a version of the catalogue as the API shows it.
type firmwareVersion struct {
	ModelNumber      string `json:"modelNumber"`
	SoftwareRevision string `json:"softwareRevision"`
	AvailableSince   string `json:"availableSince"`
	Deprecated       bool   `json:"deprecated"`
	Mandatory        bool   `json:"mandatory"`
	SHA256           string `json:"sha256"`
	Size             int64  `json:"size"`
}

func (v firmwareVersion) line() string {
	line := fmt.Sprintf("%s %s  %d bytes  since %s", v.ModelNumber, v.SoftwareRevision, v.Size, v.AvailableSince)
	if v.Mandatory {
		line += "  mandatory"
	}
	if v.Deprecated {
		line += "  deprecated"
	}
	return line
}

// firmwareInstallCommand installs a revision on a mount nearby over BLE
// with the SDK's InstallFirmware: the signed INSTALL_FIRMWARE, the image
// streamed (resumed after a lost link), the receipt and the report on the
// new revision uploaded.
func firmwareInstallCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "install",
		Usage:     "install a software revision on a mount over BLE (an owner token; a rider's gets the command from pending-commands)",
		ArgsUsage: "UID",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "revision", Usage: "software revision to install", Required: true},
			&cli.DurationFlag{Name: "restart-wait", Value: 30 * time.Second, Usage: "how long to wait for the mount to come back on the new revision"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("give one mount uid")
			}
			uid := cmd.Args().First()
			// The image streams at BLE speed: the overall limit is at
			// least the wait for the restart and a few minutes more.
			ctx, cancel := context.WithTimeout(ctx, max(s.Timeout, cmd.Duration("restart-wait")+5*time.Minute))
			defer cancel()
			client, closeClient, err := s.sdkClient()
			if err != nil {
				return err
			}
			defer closeClient()
			var bar *progress
			inst, err := client.InstallFirmware(ctx, uid, cmd.String("revision"), sdk.WithRestartWait(cmd.Duration("restart-wait")),
				sdk.WithProgress(func(sent, total int64) {
					if bar == nil {
						bar = newProgress(total)
						if bar == nil {
							bar = &progress{w: io.Discard, size: total, now: time.Now}
						}
						bar.label = "installing"
					}
					bar.Set(sent)
				}))
			bar.Finish()
			if err != nil {
				return err
			}
			return out.print(inst, func(w io.Writer) {
				fmt.Fprintf(w, "%s: %s installed (%d bytes", uid, inst.Revision, inst.Size)
				if inst.Reconnects > 0 {
					fmt.Fprintf(w, ", resumed after %d lost links", inst.Reconnects)
				}
				fmt.Fprintln(w, ")")
				if inst.Result.Receipt != nil {
					fmt.Fprintf(w, "  receipt %s, counter %d\n", inst.Result.Receipt.Outcome, inst.Result.Receipt.Counter)
				}
				if inst.Report != nil {
					fmt.Fprintf(w, "  reported on %s\n", inst.Report.SoftwareRevision)
				}
				if inst.Pending > 0 {
					fmt.Fprintf(w, "  %d uploads wait in the queue\n", inst.Pending)
				}
			})
		},
	}
}

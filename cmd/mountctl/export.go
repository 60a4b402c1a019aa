package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"
)

func exportCommand(s *settings, out *printer) *cli.Command {
	format := &cli.StringFlag{Name: "format", Value: "csv", Usage: "csv or ndjson"}
	output := &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "file to write", Required: true}
	force := &cli.BoolFlag{Name: "force", Usage: "overwrite the file if it exists"}
	return &cli.Command{
		Name:  "export",
		Usage: "export the fleet or a mount's history to a file (owners), streamed",
		Commands: []*cli.Command{{
			Name:  "mounts",
			Usage: "every mount of the account, with its latest values",
			Flags: []cli.Flag{format, output, force},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				q := url.Values{"format": {cmd.String("format")}}
				return runExport(ctx, s, out, "/exports/mounts?"+q.Encode(), cmd.String("format"), cmd.String("output"), cmd.Bool("force"))
			},
		}, {
			Name:  "states",
			Usage: "a mount's state history, oldest first",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "mount", Usage: "the mount's uid", Required: true},
				&cli.StringFlag{Name: "from", Usage: "entries from this RFC 3339 time on (inclusive)"},
				&cli.StringFlag{Name: "to", Usage: "entries before this RFC 3339 time (exclusive)"},
				format, output, force,
			},
			Action: func(ctx context.Context, cmd *cli.Command) error {
				q := url.Values{"mountUid": {cmd.String("mount")}, "format": {cmd.String("format")}}
				for _, name := range []string{"from", "to"} {
					if v := cmd.String(name); v != "" {
						q.Set(name, v)
					}
				}
				return runExport(ctx, s, out, "/exports/states?"+q.Encode(), cmd.String("format"), cmd.String("output"), cmd.Bool("force"))
			},
		}},
	}
}

// runExport writes an export to path and reports what it wrote.
func runExport(ctx context.Context, s *settings, out *printer, apiPath, format, path string, force bool) error {
	if err := s.requireToken(); err != nil {
		return err
	}
	header := int64(0)
	if format == "csv" {
		header = 1
	}
	rows := &rowCounter{header: header}
	show := newRowProgress(rows.rows)
	n, err := writeExport(ctx, path, force, func(w io.Writer) (int64, error) {
		dst := io.MultiWriter(w, rows)
		if show != nil {
			dst = io.MultiWriter(w, rows, show)
		}
		return s.api().Download(ctx, apiPath, dst)
	})
	show.Finish()
	if err != nil {
		return err
	}
	result := map[string]any{"file": path, "bytes": n, "rows": rows.rows()}
	return out.print(result, func(w io.Writer) {
		fmt.Fprintf(w, "wrote %s: %d rows, %d bytes\n", path, rows.rows(), n)
	})
}

// writeExport runs fetch into a temporary file in path's folder and
// renames it to path only when fetch succeeded: a failed or interrupted
// export never leaves a file under the name, nor a half one beside it.
func writeExport(ctx context.Context, path string, force bool, fetch func(io.Writer) (int64, error)) (int64, error) {
	if !force {
		if _, err := os.Stat(path); err == nil {
			return 0, fmt.Errorf("%s exists; pass --force to overwrite it", path)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".export-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing left to remove
	n, err := fetch(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return n, fmt.Errorf("export: %w; nothing written", err)
	}
	return n, os.Rename(tmp.Name(), path)
}

// rowCounter counts an export's rows: its lines after the header.
type rowCounter struct {
	lines, header int64
}

func (c *rowCounter) Write(b []byte) (int, error) {
	c.lines += int64(bytes.Count(b, []byte{'\n'}))
	return len(b), nil
}

func (c *rowCounter) rows() int64 { return max(0, c.lines-c.header) }

package main

import (
	"io"
	"strings"
	"testing"

	"github.com/mountd/mountd/internal/clitest"
)

// TestHelpSaysDefaultsOnce: no flag's help says "default" twice (its
// usage and cli's "(default: …)").
func TestHelpSaysDefaultsOnce(t *testing.T) {
	for _, doubled := range clitest.DoubledDefaults(newCommand(io.Discard, io.Discard)) {
		t.Error(doubled)
	}
}

// TestJobsCreateHelp: `jobs create --help` lists each command a job sends
// with its parameters and their values.
func TestJobsCreateHelp(t *testing.T) {
	var out strings.Builder
	if err := newCommand(&out, io.Discard).Run(t.Context(), []string{"mountctl", "jobs", "create", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RELEASE_HELMET   (no parameters)", "alarmMode=OFF|ON|SILENT", "alarmVolume=LOW|MEDIUM|HIGH",
		"rfidMode=NORMAL|LEARN|DISABLED", "ADD_NFC_TAG      tagUid=<a tag uid", "SYNC_NFC_TAGS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("jobs create --help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "INSTALL_FIRMWARE") || strings.Contains(out.String(), "ASSOCIATE_OWNER") {
		t.Errorf("jobs create --help offers a code a job cannot send:\n%s", out.String())
	}
}

// TestMountsShow: `mounts show` is `mounts get`.
func TestMountsShow(t *testing.T) {
	root := newCommand(io.Discard, io.Discard)
	var mounts, show, get any
	for _, c := range root.Commands {
		if c.Name == "mounts" {
			mounts = c
			for _, sub := range c.Commands {
				if sub.HasName("show") {
					show = sub
				}
				if sub.HasName("get") {
					get = sub
				}
			}
		}
	}
	if mounts == nil || show == nil || show != get {
		t.Errorf("mounts show is not mounts get (%v, %v)", show, get)
	}
}

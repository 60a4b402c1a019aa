//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sdk

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked")

// lockFile: no advisory lock on this system; one Client per queue
// directory is the app's care.
func lockFile(*os.File) error { return nil }

// syncDir: directories cannot be synced here; renames are as durable as
// the file system makes them.
func syncDir(string) error { return nil }

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package sdk

import (
	"errors"
	"os"
	"syscall"
)

var errLocked = errors.New("locked")

// lockFile takes an exclusive advisory lock on f, without waiting. The
// lock belongs to the open file: it is released when f closes, also when
// the process dies, so a crash leaves no stale lock.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

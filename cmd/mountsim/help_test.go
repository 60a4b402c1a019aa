package main

import (
	"io"
	"testing"

	"github.com/mountd/mountd/internal/clitest"
)

// TestHelpSaysDefaultsOnce: no flag's help says "default" twice.
func TestHelpSaysDefaultsOnce(t *testing.T) {
	for _, doubled := range clitest.DoubledDefaults(newCommand(io.Discard, io.Discard, nil)) {
		t.Error(doubled)
	}
}

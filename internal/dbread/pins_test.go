package dbread_test

import (
	"testing"

	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/internal/dbread"
)

func TestMemoryPinsContract(t *testing.T) {
	porttest.RunReadPins(t, func(*testing.T) dbread.Pins { return dbread.NewMemoryPins(nil) })
}

package memory_test

import (
	"testing"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) storetest.Store { return memory.NewStore() })
}

// TestRolloutContract runs the rollouts' cases of the contract suite.
func TestRolloutContract(t *testing.T) {
	storetest.RunRollouts(t, func(*testing.T) storetest.Store { return memory.NewStore() })
}

func TestRiderGrantContract(t *testing.T) {
	storetest.RunRiderGrants(t, func(*testing.T) storetest.GrantStore { return memory.NewStore() })
}

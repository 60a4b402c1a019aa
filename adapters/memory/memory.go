// Package memory holds in-process adapters of the core ports, for a single
// replica and for tests. Each instance keeps its own state: two instances
// never share anything, so none of them gives the multi-replica guarantees
// of the Redis adapters.
package memory
